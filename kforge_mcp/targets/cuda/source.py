"""CUDA source structure: the top-level blocks of a CUDA source (kernels, host glue)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kforge_mcp.targets.cuda.split import DEVICE_MARK


@dataclass
class Block:
    start: int  # 1-based lines in the piece
    end: int
    header: str

    @property
    def kernel(self) -> str | None:
        if "__global__" not in self.header:
            return None
        names = [n for n in re.findall(r"(\w+)\s*\(", self.header) if n not in ("__launch_bounds__", "__align__")]
        return names[0] if names else None

    @property
    def host_glue(self) -> bool:
        return "__global__" not in self.header and not DEVICE_MARK.search(self.header)


def top_level_blocks(code: str) -> list[Block]:
    """Top-level ``{...}`` blocks (namespaces are looked into) with the text before each."""
    blocks: list[Block] = []
    depth, line, start = 0, 1, 0
    header: list[str] = []
    namespace_depths: list[int] = []
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            j = code.find("\n", i)
            i = n if j < 0 else j
            continue
        if code.startswith("/*", i):
            j = code.find("*/", i + 2)
            j = n if j < 0 else j + 2
            line += code.count("\n", i, j)
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and code[j] != c and code[j] != "\n":
                j += 2 if code[j] == "\\" else 1
            i = j + 1
            continue
        if c == "#" and depth == len(namespace_depths) and not "".join(header).strip():
            j = code.find("\n", i)
            while j > 0 and code[j - 1] == "\\":
                line += 1
                j = code.find("\n", j + 1)
            i = n if j < 0 else j
            continue
        if c == "\n":
            line += 1
        if depth == len(namespace_depths):
            if c == "{":
                head = "".join(header)
                if re.search(r"\bnamespace\b[^;]*$", head) or re.search(r'extern\s*"C"\s*$', head.strip()):
                    namespace_depths.append(depth + 1)
                    header = []
                else:
                    start = line
                    blocks.append(Block(start, start, head.strip()))
                depth += 1
            elif c in ";}":
                header = []
                if c == "}" and namespace_depths and namespace_depths[-1] == depth:
                    namespace_depths.pop()
                    depth -= 1
            else:
                header.append(c)
        else:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == len(namespace_depths) and blocks:
                    blocks[-1].end = line
                    header = []
        i += 1
    return blocks
