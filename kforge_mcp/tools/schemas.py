"""The schemas ``tools/list`` publishes, small enough that an agent's every session can afford them.

Input schemas keep what a model needs to call a tool: every argument's type, bounds, choices, default and
description; pydantic's titles (each the argument's own name again) and null defaults go, and a nullable
scalar is written as a type list. Output schemas keep what a client needs to read a result: every field of
the result and its type; the descriptions, titles and defaults (the docs and the structured content hold
them) go, and the objects the result holds keep their own fields, nearest first, while the schema fits
OUTPUT_BUDGET characters; the others are typed as objects. Both stay valid for what the tools return."""

from __future__ import annotations

import json
from typing import Any

OUTPUT_BUDGET = 800  # characters of compact JSON per output schema
NULL = {"type": "null"}


def compact(schema: Any, keep: frozenset[str]) -> Any:
    """``schema`` without the annotation keywords outside ``keep`` (title, description, default), each
    ``anyOf`` of one simple type and null folded into a type list."""
    if isinstance(schema, list):
        return [compact(s, keep) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("properties", "$defs"):  # names of fields and definitions: never keywords themselves
            out[key] = {name: compact(s, keep) for name, s in value.items()}
        elif key == "title" or (key in ("description", "default") and key not in keep):
            continue
        elif key == "default" and value is None:
            continue
        else:
            out[key] = compact(value, keep)
    options = out.get("anyOf")
    if isinstance(options, list) and NULL in options and len(options) == 2:
        (other,) = [o for o in options if o != NULL]
        if isinstance(other.get("type"), str) and "$ref" not in other:
            del out["anyOf"]
            out |= {**other, "type": [other["type"], "null"]}
            if "enum" in other:
                out["enum"] = [*other["enum"], None]
    return out


def compact_input(schema: dict[str, Any]) -> dict[str, Any]:
    return compact(schema, frozenset({"description", "default"}))


def compact_output(schema: dict[str, Any] | None, budget: int = OUTPUT_BUDGET) -> dict[str, Any] | None:
    """``schema`` compacted, its definitions kept nearest first while the whole fits ``budget`` characters
    (the top level's fields always stay); a definition left out is typed as an object where it is used."""
    if schema is None:
        return None
    small = compact(schema, frozenset())
    defs: dict[str, Any] = small.get("$defs", {})
    kept: list[str] = []
    waiting = refs(small)  # breadth first: the result's own objects before the objects inside them
    while waiting:
        name = waiting.pop(0)
        if name in kept:
            continue
        if size(keeping(small, defs, [*kept, name])) <= budget:
            kept.append(name)
            waiting += refs(defs[name])
    return keeping(small, defs, kept)


def refs(schema: Any) -> list[str]:
    """The definitions ``schema`` refers to, in order."""
    if isinstance(schema, list):
        return [name for s in schema for name in refs(s)]
    if not isinstance(schema, dict):
        return []
    ref = schema.get("$ref")
    own = [ref.removeprefix("#/$defs/")] if isinstance(ref, str) else []
    return own + [name for k, v in schema.items() if k != "$defs" for name in refs(v)]


def keeping(schema: dict[str, Any], defs: dict[str, Any], kept: list[str]) -> dict[str, Any]:
    """``schema`` with only the ``kept`` definitions; a reference to any other typed as an object."""

    def walk(s: Any) -> Any:
        if isinstance(s, list):
            return [walk(x) for x in s]
        if not isinstance(s, dict):
            return s
        ref = s.get("$ref")
        if isinstance(ref, str) and ref.removeprefix("#/$defs/") not in kept:
            return {"type": "object"}
        return fold_null({k: walk(v) for k, v in s.items() if k != "$defs"})

    top = walk(schema)
    return top | ({"$defs": {name: walk(defs[name]) for name in kept}} if kept else {})


def size(schema: Any) -> int:
    return len(json.dumps(schema, separators=(",", ":")))


def fold_null(schema: dict[str, Any]) -> dict[str, Any]:
    """An ``anyOf`` of a plain object and null (a definition left out) as a type list."""
    options = schema.get("anyOf")
    if isinstance(options, list) and options == [{"type": "object"}, NULL]:
        return {**{k: v for k, v in schema.items() if k != "anyOf"}, "type": ["object", "null"]}
    return schema
