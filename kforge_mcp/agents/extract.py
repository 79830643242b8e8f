"""Pull the candidate module out of an LLM reply.

Replies come as one fenced ```python block (what the prompt asks for), several blocks (an
explanation with snippets, then the module), a block with no language tag, an unterminated
block (the reply was cut off), or bare code. The block that defines ``class ModelNew`` wins;
among several, the last one (models revise as they go). When nothing defines ModelNew the
error says exactly what was found, so the agent can fix its reply rather than its kernel.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

FENCE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", re.S | re.M)
MODELNEW = re.compile(r"^\s*class\s+ModelNew\b", re.M)
CODE_LANGS = {"", "python", "py", "python3", "triton"}
CODE_START = re.compile(r"^(import |from |@|def |class |[A-Za-z_]\w* = )")


class ExtractionError(ValueError):
    """No usable candidate in the reply; the message is written for the generation agent."""


@dataclass
class Extracted:
    code: str
    how: str  # 'fenced', 'fenced (n blocks)', 'unterminated fence', 'unfenced'
    notes: list[str]


def _blocks(reply: str) -> list[tuple[str, str, bool]]:
    """(language, body, terminated) for every fenced block."""
    out = []
    for m in FENCE.finditer(reply):
        body = m.group(3)
        terminated = not (
            m.end() == len(reply)
            and not re.search(rf"^[ \t]*{re.escape(m.group(1))}[ \t]*$", reply[m.start(3) :], re.M)
        )
        out.append((m.group(2).lower(), body.rstrip() + "\n", terminated))
    return out


def _unfenced(reply: str) -> str | None:
    """Bare code: from the first line that looks like Python to the end, if it parses."""
    lines = reply.splitlines()
    for i, line in enumerate(lines):
        if CODE_START.match(line):
            code = "\n".join(lines[i:]).rstrip() + "\n"
            try:
                ast.parse(code)
            except SyntaxError:
                return code if MODELNEW.search(code) else None
            return code
    return None


def extract_candidate(reply: str) -> Extracted:
    """The candidate source in ``reply``; ExtractionError with an agent-readable reason if none."""
    if not reply or not reply.strip():
        raise ExtractionError("The reply was empty. Reply with one fenced ```python block that defines class ModelNew.")
    blocks = _blocks(reply)
    code_blocks = [(lang, body, term) for lang, body, term in blocks if lang in CODE_LANGS]
    with_model = [(lang, body, term) for lang, body, term in code_blocks if MODELNEW.search(body)]
    notes: list[str] = []
    if with_model:
        lang, body, terminated = with_model[-1]
        if len(with_model) > 1:
            notes.append(f"{len(with_model)} blocks define ModelNew; the last one was used")
        how = "fenced" if len(blocks) == 1 else f"fenced ({len(blocks)} blocks)"
        if not terminated:
            how = "unterminated fence"
            notes.append("the code block was not closed (reply cut off?)")
        return Extracted(body, how, notes)
    if not blocks:
        code = _unfenced(reply)
        if code and MODELNEW.search(code):
            return Extracted(code, "unfenced", ["the reply had no code fence; the code was taken from the bare text"])
        raise ExtractionError(
            "No code block found and no `class ModelNew` in the reply. Reply with one fenced "
            "```python block containing the whole module, including `class ModelNew(nn.Module)`."
        )
    if any("ModelNew" in body for _, body, _ in blocks):
        raise ExtractionError(
            "ModelNew is mentioned but never defined as a class: the module must contain "
            "`class ModelNew(nn.Module):` at top level."
        )
    langs = ", ".join(sorted({lang or "untagged" for lang, _, _ in blocks}))
    defined = sorted({m for _, body, _ in blocks for m in re.findall(r"^\s*class\s+(\w+)", body, re.M)})
    found = f"; it defines class(es) {', '.join(defined)}" if defined else ""
    raise ExtractionError(
        f"The reply has {len(blocks)} code block(s) ({langs}) but none defines `class ModelNew`"
        f"{found}. Put the whole module, including `class ModelNew(nn.Module)` with the reference "
        "Model's constructor and forward signature, in one ```python block."
    )
