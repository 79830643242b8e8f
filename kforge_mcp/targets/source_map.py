"""Finding the kernel source strings a candidate passes to its build again in the submitted Python
file, so that compiler messages point at lines of that file (the cuda and metal targets both use it),
and reading lists out of that source text.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import cast


@dataclass
class Piece:
    """One CUDA or C++ source string, and the Python line of each of its lines (None: unknown)."""

    text: str
    lines: list[int | None]
    label: str

    def annotated(self, file: str) -> str:
        """The text with ``#line`` directives wherever its lines stop running on consecutively."""
        out, expected, continued = [], None, False
        for text, line in zip(self.text.split("\n"), self.lines):
            if line is not None and line != expected and not continued:
                out.append(f'#line {line} "{file}"')
            out.append(text)
            expected = None if line is None else line + 1
            continued = text.rstrip().endswith("\\")
        return "\n".join(out)


def _string_constants(text: str) -> list[tuple[ast.Constant, str]]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) >= 8:
            found.append((node, ast.get_source_segment(text, node) or ""))
    return found


def _map_constant(value: str, node: ast.Constant, segment: str, src_lines: list[str]) -> list[int | None]:
    n = value.count("\n") + 1
    if segment.count("\n") == value.count("\n"):  # a plain (triple-quoted) literal: lines match one to one
        return [node.lineno + i for i in range(n)]
    # escapes or implicit concatenation: find each line in the file, in order
    out: list[int | None] = []
    cursor = node.lineno
    assert node.end_lineno is not None  # ast.parse sets every node's end
    for text in value.split("\n"):
        key = text.strip()
        line = None
        if key:
            for ln in range(cursor, min(node.end_lineno, len(src_lines)) + 1):
                if key in src_lines[ln - 1]:
                    line = ln
                    break
        if line is None:
            line = cursor
        out.append(line)
        cursor = line
    return out


def map_pieces(strings: list[str], text: str, label: str) -> list[Piece]:
    constants = _string_constants(text)
    src_lines = text.splitlines()
    pieces = []
    for i, value in enumerate(strings):
        lines: list[int | None] = [None] * (value.count("\n") + 1)
        exact = next(((n, s) for n, s in constants if n.value == value), None)
        if exact:
            lines = _map_constant(value, exact[0], exact[1], src_lines)
        else:  # built from parts: map every literal found inside it
            for node, seg in sorted(constants, key=lambda c: -len(cast(str, c[0].value))):
                literal = cast(str, node.value)  # _string_constants keeps str values only
                at = value.find(literal)
                if at < 0 or (at > 0 and value[at - 1] != "\n"):
                    continue
                first = value[:at].count("\n")
                sub = _map_constant(literal, node, seg, src_lines)
                if all(x is None for x in lines[first : first + len(sub)]):
                    lines[first : first + len(sub)] = sub
        pieces.append(Piece(value, lines, f"{label}[{i}]"))
    return pieces


def top_level_commas(text: str) -> list[tuple[str, int]]:
    """A comma-separated list cut at its top-level commas only (not inside (), <>, [], {}): each part with
    its offset in ``text``; a blank last part (an empty list, a trailing comma) is left out."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append((text[start:i], start))
            start = i + 1
    if text[start:].strip():
        parts.append((text[start:], start))
    return parts
