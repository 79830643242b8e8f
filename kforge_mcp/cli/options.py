"""The verbs' options, derived from the models of the calls they make (core/options.py): one name per
argument in every verb (a field ``timeout_s`` is ``--timeout S``, ``timing_budget_s`` ``--timing-budget S``),
lists comma-separated, choices and defaults from the model, help from its description. An option left out is
left out of the call, so the model's default applies; the model checks the values (an InputError naming the
field, exit 2)."""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel

from kforge_mcp.cli.console import comma_list
from kforge_mcp.core.options import TARGET_TEXT
from kforge_mcp.targets import TARGETS


def flag(name: str) -> str:
    """``timeout_s`` -> ``--timeout``: seconds say so in their metavar, not in the name."""
    return "--" + name.removesuffix("_s").replace("_", "-")


def add_target(p: argparse.ArgumentParser, required: bool = True) -> None:
    """``--target``, one of the registered targets (named in the usage; an unknown one gets the engine's error,
    which names the known ones, as the MCP tools do)."""
    p.add_argument("--target", required=required, metavar="{" + ",".join(TARGETS) + "}", help=TARGET_TEXT)


def add_options(p: argparse.ArgumentParser, model: type[BaseModel], names: Iterable[str], **helps: str) -> None:
    """An option for each field of ``model`` named, in the same words as the MCP tool's (``helps`` replaces a
    field's description where the CLI says it its own way); ``given(args)`` gives back those set."""
    names = tuple(names)
    p.set_defaults(call_options=names)
    for name in names:
        info = model.model_fields[name]
        text = helps.get(name) or info.description or ""
        kind, choices = plain(info.annotation)
        default = info.get_default(call_default_factory=True)
        if kind is bool:
            on = not default
            p.add_argument(
                flag(name) if on else f"--no-{name.replace('_', '-')}",
                dest=name,
                action="store_true" if on else "store_false",
                default=argparse.SUPPRESS,
                help=text if on else f"do not: {text}",
            )
            continue
        shown = (
            ",".join(default)
            if isinstance(default, list)
            else f"{default:g}"
            if isinstance(default, float)
            else default
        )
        if kind is list:
            text += " (comma-separated)"
        p.add_argument(
            flag(name),
            dest=name,
            type=comma_list if kind is list else kind,
            choices=choices if kind is not list else None,
            default=argparse.SUPPRESS,
            metavar=metavar(name, kind, choices),
            help=text
            + (f" (default {shown})" if shown is not None else "")
            + (" (comma-separated)" if kind is list else ""),
        )


def metavar(name: str, kind: Any, choices: list[str] | None) -> str | None:
    if name.endswith(("_s", "seconds")):
        return "S"
    if kind is list:
        return ",".join(choices) if choices else "A,B"
    return {int: "N", float: "X"}.get(kind)


def plain(annotation: Any) -> tuple[Any, list[str] | None]:
    """The command-line type of a field (int, float, str, bool or list) and its choices, if closed."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return plain(args[0])
    if typing.get_origin(annotation) is Literal:
        return str, [str(a) for a in args]
    if typing.get_origin(annotation) is list:
        return list, plain(args[0])[1]
    return annotation, None


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The call's options the command line gave (add_options made them); the rest keep the model's defaults."""
    return {name: getattr(args, name) for name in args.call_options if hasattr(args, name)}
