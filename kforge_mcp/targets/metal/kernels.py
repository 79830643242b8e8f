"""The Metal source of a candidate, read without a Metal compiler: its kernels and their parameters,
checked against Apple's limits (threads and threadgroup memory per group).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kforge_mcp.targets.source_map import top_level_commas

MAX_THREADS_PER_GROUP = 1024  # Apple GPUs (Metal feature set tables): threads per threadgroup


MAX_THREADGROUP_MEMORY = 32 * 1024  # bytes of threadgroup memory per threadgroup


SIMD_WIDTH = 32  # threadExecutionWidth on Apple GPUs


SCALAR_BYTES = {
    "bool": 1,
    "char": 1,
    "uchar": 1,
    "short": 2,
    "ushort": 2,
    "half": 2,
    "bfloat": 2,
    "int": 4,
    "uint": 4,
    "float": 4,
    "long": 8,
    "ulong": 8,
    "int8_t": 1,
    "uint8_t": 1,
    "int16_t": 2,
    "uint16_t": 2,
    "int32_t": 4,
    "uint32_t": 4,
    "int64_t": 8,
    "uint64_t": 8,
    "size_t": 8,
}


INT_TYPES = {k for k in SCALAR_BYTES if k not in ("half", "bfloat", "float", "bool")}


FLOAT_TYPES = {"half", "bfloat", "float"}


GRID_BUILTINS = ("thread_position_in_grid", "threadgroup_position_in_grid", "threads_per_grid", "threadgroups_per_grid")


@dataclass
class Param:
    name: str
    text: str
    line: int  # 1-based line in the MSL source
    kind: str  # buffer | scalar | builtin | threadgroup | invalid
    base_type: str = ""
    buffer_index: int | None = None
    builtin: str | None = None


@dataclass
class Kernel:
    name: str
    line: int
    return_type: str
    params: list[Param]
    threadgroup_bytes: int = 0
    body_line: int = 0

    def bindable(self) -> list[Param]:
        """Parameters a dispatch call passes, in buffer-index order (how torch binds them)."""
        ps = [p for p in self.params if p.kind in ("buffer", "scalar")]
        return sorted(ps, key=lambda p: p.buffer_index if p.buffer_index is not None else 0)

    def grid_dims(self) -> int | None:
        for p in self.params:
            if p.builtin in GRID_BUILTINS:
                m = re.search(r"(\d)\s*$", p.base_type)
                return int(m.group(1)) if m else 1
        return None


def strip_comments(code: str) -> str:
    """Comments replaced by spaces, newlines kept, so offsets and line numbers stay put."""

    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    return re.sub(r"//[^\n]*|/\*.*?\*/", blank, code, flags=re.S)


def _matching(code: str, start: int, open_ch: str, close_ch: str) -> int:
    depth = 0
    for i in range(start, len(code)):
        if code[i] == open_ch:
            depth += 1
        elif code[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _parse_param(text: str, line: int, auto_index: int) -> Param:
    attrs = re.findall(r"\[\[\s*([^\]]+?)\s*\]\]", text)
    decl = re.sub(r"\[\[[^\]]*\]\]", " ", text).strip()
    m = re.search(r"(\w+)\s*$", decl)
    name = m.group(1) if m else decl
    type_text = decl[: m.start()].strip() if m else ""
    words = [w for w in re.findall(r"[\w:]+", type_text) if w not in ("const", "volatile", "restrict")]
    space = next((w for w in words if w in ("device", "constant", "threadgroup", "thread")), None)
    base = " ".join(w for w in words if w not in ("device", "constant", "threadgroup", "thread")).replace("metal::", "")
    param = Param(name=name, text=" ".join(text.split()), line=line, kind="invalid", base_type=base)
    for a in attrs:
        bm = re.fullmatch(r"buffer\s*\(\s*(\d+)\s*\)", a)
        if bm:
            param.buffer_index = int(bm.group(1))
        elif re.fullmatch(r"threadgroup\s*\(\s*\d+\s*\)", a):
            param.kind = "threadgroup"
            return param
        elif re.fullmatch(r"[a-z_]+", a):
            param.kind, param.builtin = "builtin", a
            return param
    if space == "threadgroup":
        param.kind = "threadgroup"
    elif space in ("device", "constant") and "*" in type_text:
        param.kind = "buffer"
    elif space in ("device", "constant") and "&" in type_text:
        param.kind = "scalar" if space == "constant" else "buffer"
    if param.kind in ("buffer", "scalar") and param.buffer_index is None:
        param.buffer_index = auto_index
    return param


def _threadgroup_bytes(body: str) -> int:
    total = 0
    for m in re.finditer(r"\bthreadgroup\s+(?:metal::)?(\w+?)(\d?)\s+\w+\s*((?:\[\s*\d+\s*\])+)", body):
        base, lanes, dims = m.group(1), int(m.group(2) or 1), re.findall(r"\d+", m.group(3))
        count = 1
        for d in dims:
            count *= int(d)
        total += SCALAR_BYTES.get(base, 4) * (4 if lanes == 3 else lanes) * count  # a float3 takes 16 bytes
    return total


def parse_kernels(msl: str) -> list[Kernel]:
    """Every ``kernel`` function (and ``[[host_name("x")]]`` instantiation) in an MSL source."""
    code = strip_comments(msl)
    kernels = []
    head = re.compile(
        r'(?:\[\[\s*host_name\(\s*"(\w+)"\s*\)\s*\]\]\s*)?(?:\[\[\s*kernel\s*\]\]|\bkernel\b)\s+'
        r"([\w:<>]+)\s+(\w+)\s*(<[^>()]*>)?\s*\("
    )
    for m in head.finditer(code):
        open_at = m.end() - 1
        close_at = _matching(code, open_at, "(", ")")
        if close_at < 0:
            continue
        line = code.count("\n", 0, m.start()) + 1
        params, bindable = [], 0
        plist = code[open_at + 1 : close_at]
        for text, offset in top_level_commas(plist):
            if not text.strip():
                continue
            pline = code.count("\n", 0, open_at + 1 + offset + len(text) - len(text.lstrip())) + 1
            p = _parse_param(text, pline, bindable)
            if p.kind in ("buffer", "scalar"):
                bindable += 1
            params.append(p)
        k = Kernel(name=m.group(1) or m.group(3), line=line, return_type=m.group(2), params=params)
        body_at = code.find("{", close_at)
        if body_at >= 0 and not code[close_at + 1 : body_at].strip().endswith(";"):
            body_end = _matching(code, body_at, "{", "}")
            k.threadgroup_bytes = _threadgroup_bytes(code[body_at:body_end])
            k.body_line = code.count("\n", 0, body_at) + 1
        kernels.append(k)
    return kernels


def check_kernels(kernels: list[Kernel]) -> list[tuple[int, str, str]]:
    """Problems in the kernels themselves: (MSL line, severity, message)."""
    out = []
    if not kernels:
        out.append((1, "error", "the Metal source defines no `kernel void name(...)` function"))
    for k in kernels:
        if k.return_type != "void":
            out.append((k.line, "error", f"kernel {k.name} returns {k.return_type}: Metal kernels return void"))
        for p in k.params:
            if p.kind == "threadgroup":
                out.append(
                    (
                        p.line,
                        "error",
                        f"kernel {k.name}: parameter '{p.name}' is threadgroup memory, which "
                        "torch.mps.compile_shader's dispatch cannot size; declare it in the body "
                        f"(threadgroup float {p.name}[256];)",
                    )
                )
            elif p.kind == "invalid":
                out.append(
                    (
                        p.line,
                        "error",
                        f"kernel {k.name}: parameter '{p.text}' is neither a buffer "
                        "(device T* / constant T*), a scalar (constant T&) nor a builtin "
                        "([[thread_position_in_grid]] ...)",
                    )
                )
        indices = [p.buffer_index for p in k.bindable()]
        if indices != list(range(len(indices))):
            out.append(
                (
                    k.line,
                    "error",
                    f"kernel {k.name}: buffer indices {indices} are not 0..{len(indices) - 1}; "
                    "torch binds positional argument i to buffer(i)",
                )
            )
        if k.grid_dims() is None:
            out.append(
                (
                    k.line,
                    "warning",
                    f"kernel {k.name} reads no [[thread_position_in_grid]] (or threadgroup "
                    "position): every thread would do the same work",
                )
            )
        if k.threadgroup_bytes > MAX_THREADGROUP_MEMORY:
            out.append(
                (
                    k.body_line or k.line,
                    "error",
                    f"kernel {k.name} declares {k.threadgroup_bytes} bytes of threadgroup memory; Apple GPUs "
                    f"allow {MAX_THREADGROUP_MEMORY}",
                )
            )
    return out
