"""Metal: Metal Shading Language kernels compiled with ``torch.mps.compile_shader(src)`` and
dispatched from ``ModelNew.forward`` as ``lib.kernel(*tensors, *scalars, threads=..., group_size=...)``.

Running needs macOS on an Apple GPU with torch >= 2.7. What can be checked without one runs
anywhere, statically (no candidate code is executed): the MSL kernels' signatures, the dispatch
calls' arguments against them, and threads / group size / threadgroup memory against Apple's
limits. On a Mac, ``compile`` and ``load`` wrap ``compile_shader`` so the Metal compiler's
messages ("program_source:LINE:COL: error: ...") point at lines of the submitted Python file.

Binding rules this relies on (torch's MetalKernelFunction): positional argument i binds buffer
index i; a tensor binds its storage (with offset); a Python int is sent as int64 (``constant
long&``), a Python float as float32 (``constant float&``); ``threads`` is the whole grid in
threads (dispatchThreads), ``group_size`` the threads per threadgroup, each an int or up to 3 dims.
"""

from __future__ import annotations

import ast
import contextlib
import platform
import re
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..problem import Source
from ..schemas import CompileReport, Diagnostic, Finding, KernelResources, TargetStatus
from ..source import SourceRuntimeError, import_source
from .base import dist_version
from .cuda import Piece, map_pieces

REQUIRES = "metal"  # the resource a machine must have to run this target (executors route on it)
MIN_TORCH = (2, 7)  # torch.mps.compile_shader became public in 2.7
NEEDS = "needs macOS with an Apple GPU and torch >= 2.7 (torch.mps.compile_shader)"
MAX_THREADS_PER_GROUP = 1024  # Apple GPUs (Metal feature set tables): threads per threadgroup
MAX_THREADGROUP_MEMORY = 32 * 1024  # bytes of threadgroup memory per threadgroup
SIMD_WIDTH = 32  # threadExecutionWidth on Apple GPUs
COMPILER_MESSAGE = re.compile(r"program_source:(\d+):(\d+):\s*(error|warning|note):\s*(.*)")
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


# ---- the Metal source: kernels and their parameters ----


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


def _split_params(text: str) -> list[tuple[str, int]]:
    """Top-level commas only (not inside (), <>, [[ ]]); each part with its offset in ``text``."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append((text[start:i], start))
            start = i + 1
    if text[start:].strip():
        parts.append((text[start:], start))
    return parts


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
        for text, offset in _split_params(plist):
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


# ---- the Python side: which sources are compiled, and how their kernels are dispatched ----


@dataclass
class Library:
    names: set[str]  # variable or attribute names the compiled library is bound to
    msl: str | None
    call_line: int
    kernels: list[Kernel] = field(default_factory=list)
    piece: Piece | None = None
    compiled: Any = None  # torch's library, once compiled (on a Mac)

    def py_line(self, msl_line: int) -> int:
        if self.piece is not None and 0 < msl_line <= len(self.piece.lines) and self.piece.lines[msl_line - 1]:
            return self.piece.lines[msl_line - 1]
        return self.call_line


def _is_compile_shader(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Attribute) and f.attr == "compile_shader") or (
        isinstance(f, ast.Name) and f.id == "compile_shader"
    )


def _target_names(targets: list[ast.expr]) -> set[str]:
    return {t.id if isinstance(t, ast.Name) else t.attr for t in targets if isinstance(t, (ast.Name, ast.Attribute))}


def _module_constants(tree: ast.Module) -> dict[str, Any]:
    """Module-level NAME = <constant expression> (strings, numbers), in order."""
    consts: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = const_eval(node.value, consts)
            if value is not None:
                consts[node.targets[0].id] = value
    return consts


def const_eval(node: ast.AST, names: dict[str, Any]) -> Any:
    """Value of a constant expression (literals, known names, + - * // on them, tuples), else None."""
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (str, int, float))
        and not isinstance(node.value, bool)
    ):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, (ast.Tuple, ast.List)):
        values = [const_eval(e, names) for e in node.elts]
        return tuple(values) if all(v is not None for v in values) else None
    if isinstance(node, ast.BinOp):
        a, b = const_eval(node.left, names), const_eval(node.right, names)
        if a is None or b is None or isinstance(a, tuple) or isinstance(b, tuple):
            return None
        try:
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, ast.FloorDiv):
                return a // b
        except (TypeError, ZeroDivisionError):
            return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "dedent" and node.args:
        import textwrap

        text = const_eval(node.args[0], names)
        return textwrap.dedent(text) if isinstance(text, str) else None
    return None


def python_kind(node: ast.AST, names: dict[str, Any]) -> str | None:
    """'int' or 'float' when the argument is visibly a Python scalar of that kind, else None."""
    value = const_eval(node, names)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name) and f.id in ("int", "len"):
            return "int"
        if isinstance(f, ast.Name) and f.id == "float":
            return "float"
        if isinstance(f, ast.Attribute) and f.attr in ("numel", "size", "stride", "dim", "element_size"):
            return "int"
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
        return "int"
    return None


def find_libraries(tree: ast.Module, text: str, names: dict[str, Any]) -> list[Library]:
    libs = []
    for node in ast.walk(tree):
        value, targets = None, []
        if isinstance(node, ast.Assign):
            value, targets = node.value, node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            value, targets = node.value, [node.target]
        if value is None or not _is_compile_shader(value):
            continue
        msl = const_eval(value.args[0], names) if value.args else None
        lib = Library(names=_target_names(targets), msl=msl if isinstance(msl, str) else None, call_line=value.lineno)
        if lib.msl is not None:
            lib.kernels = parse_kernels(lib.msl)
            lib.piece = map_pieces([lib.msl], text, "metal")[0]
        libs.append(lib)
    return libs


def _owner_name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def check_dispatches(tree: ast.Module, libs: list[Library], names: dict[str, Any]) -> list[tuple[int, str, str]]:
    """Each ``lib.kernel(...)`` (or a kernel bound to a name first) against the kernel it calls."""
    by_name = {n: lib for lib in libs for n in lib.names}
    aliases: dict[str, tuple[Library, str]] = {}  # fn = lib.kernel  /  self.fn = lib.kernel
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute):
            lib = by_name.get(_owner_name(node.value.value) or "")
            if lib is not None:
                for n in _target_names(node.targets):
                    aliases[n] = (lib, node.value.attr)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        target = None
        if isinstance(f, ast.Attribute) and _owner_name(f.value) in by_name:
            target = (by_name[_owner_name(f.value)], f.attr)
        elif _owner_name(f) in aliases:
            target = aliases[_owner_name(f)]
        if target is None or target[0].msl is None:
            continue
        out += check_call(node, target[0], target[1], names)
    return out


def check_call(call: ast.Call, lib: Library, kname: str, names: dict[str, Any]) -> list[tuple[int, str, str]]:
    line = call.lineno
    kernel = next((k for k in lib.kernels if k.name == kname), None)
    if kernel is None:
        known = ", ".join(k.name for k in lib.kernels) or "none"
        return [(line, "error", f"dispatch of '{kname}': the Metal library has no such kernel (kernels: {known})")]
    out = []
    bindable = kernel.bindable()
    if any(isinstance(a, ast.Starred) for a in call.args):
        return out  # *args: the count is not visible statically
    if len(call.args) != len(bindable):
        want = ", ".join(p.name for p in bindable)
        out.append(
            (
                line,
                "error",
                f"{kname} takes {len(bindable)} arguments ({want}) but this dispatch passes {len(call.args)}",
            )
        )
    for arg, p in zip(call.args, bindable):
        kind = python_kind(arg, names)
        if kind is None:
            continue
        if p.kind == "buffer":
            out.append(
                (
                    line,
                    "error",
                    f"{kname}: argument '{p.name}' is a buffer ({p.text}) but a Python {kind} is passed; pass a tensor",
                )
            )
        elif kind == "int" and p.base_type in FLOAT_TYPES:
            out.append(
                (
                    line,
                    "error",
                    f"{kname}: argument '{p.name}' is {p.base_type} but a Python int is passed "
                    "(sent as int64): pass float(...)",
                )
            )
        elif kind == "float" and p.base_type in INT_TYPES:
            out.append(
                (
                    line,
                    "error",
                    f"{kname}: argument '{p.name}' is {p.base_type} but a Python float is passed "
                    "(sent as float32): pass int(...)",
                )
            )
        elif kind == "int" and SCALAR_BYTES.get(p.base_type, 8) < 8:
            out.append(
                (
                    line,
                    "warning",
                    f"{kname}: argument '{p.name}' is {p.base_type} but torch sends a Python int "
                    "as int64; declare `constant long&` (a narrower type reads only the low "
                    "bytes)",
                )
            )
        elif kind == "float" and p.base_type != "float":
            out.append(
                (
                    line,
                    "warning",
                    f"{kname}: argument '{p.name}' is {p.base_type} but torch sends a Python "
                    "float as float32; declare `constant float&`",
                )
            )
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    if "threads" not in kw:
        out.append((line, "warning", f"{kname}: no threads= at this dispatch; pass the grid size in threads"))
    threads = _dims(const_eval(kw["threads"], names)) if "threads" in kw else None
    group = _dims(const_eval(kw["group_size"], names)) if "group_size" in kw else None
    for label, dims in (("threads", threads), ("group_size", group)):
        if dims is not None and (not 1 <= len(dims) <= 3 or any(not isinstance(d, int) or d < 1 for d in dims)):
            out.append((line, "error", f"{kname}: {label}={dims} must be a positive int or 1-3 positive ints"))
    if group is not None and all(isinstance(d, int) for d in group):
        total = 1
        for d in group:
            total *= d
        if total > MAX_THREADS_PER_GROUP:
            out.append(
                (
                    line,
                    "error",
                    f"{kname}: group_size {group} is {total} threads per threadgroup; Apple GPUs "
                    f"allow at most {MAX_THREADS_PER_GROUP}",
                )
            )
        elif total % SIMD_WIDTH:
            out.append(
                (
                    line,
                    "warning",
                    f"{kname}: group_size {group} ({total} threads) is not a multiple of the "
                    f"SIMD width {SIMD_WIDTH}: the last SIMD-group runs partly empty",
                )
            )
    dims = kernel.grid_dims()
    n = len(threads) if threads is not None else (1 if "threads" in kw and python_kind(kw["threads"], names) else None)
    if dims is not None and n is not None and dims != n:
        out.append(
            (line, "warning", f"{kname}: the kernel's grid position is {dims}-D but threads= gives {n} dimension(s)")
        )
    return out


def _dims(value: Any) -> tuple | None:
    if value is None or isinstance(value, str):
        return None
    return tuple(value) if isinstance(value, tuple) else (value,)


def static_diagnostics(source: Source) -> list[Diagnostic]:
    """Everything checkable without an Apple GPU, as diagnostics on lines of the submitted file."""
    try:
        tree = ast.parse(source.text)
    except SyntaxError as e:
        return [Diagnostic(line=e.lineno, column=e.offset, message=f"SyntaxError: {e.msg}", file=source.name)]
    names = _module_constants(tree)
    libs = find_libraries(tree, source.text, names)
    diags = []
    if not libs:
        return [
            Diagnostic(
                file=source.name,
                message="no torch.mps.compile_shader(...) call: a Metal candidate compiles "
                "its MSL source with torch.mps.compile_shader and dispatches its "
                "kernels from ModelNew.forward",
            )
        ]
    for lib in libs:
        if lib.msl is None:
            diags.append(
                Diagnostic(
                    line=lib.call_line,
                    severity="note",
                    file=source.name,
                    message="the Metal source passed here is built at run time; static checks of its "
                    "kernels are skipped (the Metal compiler still checks it on a Mac)",
                )
            )
            continue
        for msl_line, severity, message in check_kernels(lib.kernels):
            kernel = next((k.name for k in lib.kernels if k.line <= msl_line), None)
            diags.append(
                Diagnostic(
                    line=lib.py_line(msl_line), severity=severity, message=message, file=source.name, kernel=kernel
                )
            )
    for line, severity, message in check_dispatches(tree, libs, names):
        diags.append(Diagnostic(line=line, severity=severity, message=message, file=source.name))
    return diags


# ---- the Metal compiler's messages, mapped to the submitted file ----


def expansion_map(msl: str) -> list[tuple[int, str | None]]:
    """For each line torch hands the Metal compiler (after it inlines #include <c10/metal/...>
    headers), the MSL line it came from and the header it is in (None: the submitted source)."""
    import torch
    from torch.utils._cpp_embed_headers import _embed_headers

    include = [Path(torch.__file__).parent / "include"]
    processed: set[str] = set()
    out: list[tuple[int, str | None]] = []
    for i, line in enumerate(msl.split("\n"), start=1):
        expanded = _embed_headers([line + "\n"], include, processed)
        header = None
        m = re.match(r'^\s*#include\s*[<"]([^>"]+)[>"]', line)
        if m and expanded != line + "\n":
            header = m.group(1)
        out += [(i, header)] * expanded.count("\n")
    return out


def compiler_diagnostics(message: str, lib: Library, source: Source) -> list[Diagnostic]:
    """``program_source:L:C: error: ...`` lines from the Metal compiler, on lines of the Python file."""
    lines = expansion_map(lib.msl) if lib.msl is not None else []
    diags = []
    for m in COMPILER_MESSAGE.finditer(message):
        line, col, severity, text = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4).strip()
        msl_line, header = lines[line - 1] if 0 < line <= len(lines) else (None, None)
        if header:
            text = f"in {header} (included here): {text}"
        py_line = lib.py_line(msl_line) if msl_line else lib.call_line
        in_place = msl_line is not None and not header and lib.piece is not None
        diags.append(
            Diagnostic(
                line=py_line, column=col if in_place else None, severity=severity, message=text, file=source.name
            )
        )
    if not diags:
        diags.append(
            Diagnostic(line=lib.call_line, file=source.name, message=f"Metal compile failed: {message[-2000:]}")
        )
    return diags


# ---- the target ----


def torch_version() -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", dist_version("torch") or "0.0")
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def unavailable_reason() -> str | None:
    """Why Metal kernels cannot run here, naming what is needed; None when they can."""
    if platform.system() != "Darwin":
        return f"{NEEDS}; this machine runs {platform.system() or 'an unknown OS'}"
    if torch_version() < MIN_TORCH:
        return f"{NEEDS}; torch here is {dist_version('torch')}"
    import torch

    if not torch.backends.mps.is_available():
        return f"{NEEDS}; torch.backends.mps.is_available() is False here"
    return None


@dataclass
class LaunchCount:
    count: int = 0


_counter: LaunchCount | None = None  # the launch_counter context in force, if any


class _CountedKernel:
    """A library kernel whose dispatches are counted (for the 'no kernel launched' guard)."""

    def __init__(self, fn):
        self._fn = fn

    def __call__(self, *args, **kwargs):
        if _counter is not None:
            _counter.count += 1
        return self._fn(*args, **kwargs)

    def __getattr__(self, item):
        return getattr(self._fn, item)


class _CountedLibrary:
    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, item):
        value = getattr(self._lib, item)
        return _CountedKernel(value) if callable(value) else value


class MetalTarget:
    name = "metal"
    summary = "Metal Shading Language kernels through torch.mps.compile_shader (Apple GPUs)"
    requires = REQUIRES

    def probe(self, devices: list[str]) -> TargetStatus:
        versions = {k: v for k, v in {"torch": dist_version("torch"), "macos": platform.mac_ver()[0]}.items() if v}
        notes = [
            "static checks (kernel signatures, dispatch arguments, threads and group size against Apple's "
            "limits) run anywhere: compile reports them where Metal cannot run"
        ]
        reason = unavailable_reason()
        if reason is not None or "mps" not in devices:
            return TargetStatus(
                name=self.name,
                available=False,
                reason=reason or f"{NEEDS}; no mps device found",
                versions=versions,
                notes=notes,
                requires=[REQUIRES],
            )
        return TargetStatus(
            name=self.name,
            available=True,
            devices=["mps"],
            can_compile=True,
            versions=versions,
            notes=notes,
            requires=[REQUIRES],
        )

    def check(self, source: Source) -> list[Finding]:
        errors = [d for d in static_diagnostics(source) if d.severity == "error"]
        if not errors:
            return []
        return [
            Finding(
                code="metal_static_check",
                severity="info",
                message=f"line {d.line}: {d.message}",
                evidence={"line": d.line},
            )
            for d in errors
        ]

    def static_diagnostics(self, source: Source) -> list[Diagnostic]:
        return static_diagnostics(source)

    def execution(self, device: str) -> str:
        return "metal" if device == "mps" else "unavailable"

    @contextlib.contextmanager
    def launch_counter(self):
        global _counter
        previous, _counter = _counter, LaunchCount()
        try:
            yield _counter
        finally:
            _counter = previous

    def _import(self, source: Source, workdir: Path) -> tuple[types.ModuleType, list[Library], list[Diagnostic]]:
        """Import the candidate with compile_shader wrapped: each library is counted and a compile
        error becomes diagnostics on the Python file's lines."""
        import torch

        reason = unavailable_reason()
        if reason is not None:
            raise InputError(f"target 'metal' {reason}")
        real = torch.mps.compile_shader
        try:
            tree = ast.parse(source.text)
            known = find_libraries(tree, source.text, _module_constants(tree))
        except SyntaxError:
            known = []  # import_source reports it, with the line
        built: list[Library] = []
        errors: list[Diagnostic] = []

        def compiling(src: str):
            lib = next((x for x in known if x.msl == src), None) or Library(names=set(), msl=src, call_line=0)
            if lib.piece is None:
                lib.piece = map_pieces([src], source.text, "metal")[0]
                lib.kernels = parse_kernels(src)
            try:
                compiled = real(src)
            except (SyntaxError, RuntimeError) as e:
                errors.extend(compiler_diagnostics(str(e), lib, source))
                raise
            lib.compiled = compiled
            built.append(lib)
            return _CountedLibrary(compiled)

        # libraries compiled while the module is imported are wrapped; one compiled later, inside
        # forward, gets torch's own function: it runs, but its dispatches are not counted
        torch.mps.compile_shader = compiling
        try:
            module = import_source(source, workdir, "candidate")
        except SourceRuntimeError as e:
            if not errors:
                raise
            summary = "; ".join(f"line {d.line}: {d.message}" for d in errors[:3])
            raise SourceRuntimeError(
                f"{source.name}: Metal compile failed: {summary}", errors + e.diagnostics[:1]
            ) from None
        finally:
            torch.mps.compile_shader = real
        return module, built, errors

    def compile(self, source: Source, arch: str | None, problem: Source | None, workdir: Path) -> CompileReport:
        started = time.perf_counter()
        report = CompileReport(ok=False, target=self.name, arch=arch or "apple-gpu", signature_source="source")
        static = static_diagnostics(source)
        try:
            _, built, _ = self._import(source, workdir)
        except (InputError, SourceRuntimeError) as e:
            report.diagnostics = e.diagnostics + [d for d in static if d.severity != "error"]
            if isinstance(e, InputError) and not e.diagnostics:
                report.diagnostics.insert(0, Diagnostic(message=e.message, file=source.name))
            report.seconds = time.perf_counter() - started
            return report
        report.kernels = [_kernel_resources(lib, k) for lib in built for k in lib.kernels]
        report.diagnostics = static
        report.ok = bool(built) and not any(d.severity == "error" for d in static)
        if not built:
            report.diagnostics.append(
                Diagnostic(file=source.name, message="importing the candidate compiled no Metal library")
            )
        report.seconds = time.perf_counter() - started
        return report

    def load(self, source: Source, device: str, workdir: Path) -> types.ModuleType:
        if device != "mps":
            raise InputError(f"target 'metal' runs on device 'mps', not '{device}'")
        module, _, _ = self._import(source, workdir)
        return module


def _kernel_resources(lib: Library, k: Kernel) -> KernelResources:
    """The kernel's parameters, plus what the compiled pipeline reports (threads per threadgroup
    it allows, SIMD width, static threadgroup memory) when the library was compiled."""
    signature = {p.name: f"{p.kind} {p.base_type}".strip() for p in k.params}
    shared = k.threadgroup_bytes
    fn = getattr(lib.compiled, k.name, None) if lib.compiled is not None else None
    for prop in ("max_threads_per_threadgroup", "thread_execution_width", "static_thread_group_memory_length"):
        with contextlib.suppress(Exception):
            value = getattr(fn, prop)
            signature[prop] = str(value)
            if prop == "static_thread_group_memory_length":
                shared = int(value)
    return KernelResources(name=k.name, shared_bytes=shared, signature=signature)
