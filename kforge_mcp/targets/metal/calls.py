"""The Python side of a Metal candidate, read without running it: which libraries it compiles with
torch.mps.compile_shader, and whether each dispatch's arguments, threads and group size fit the
kernel it calls; and the Metal compiler's messages mapped back to lines of the Python file.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from kforge_mcp.core.problem import Source
from kforge_mcp.core.schemas import Diagnostic
from kforge_mcp.targets.metal.kernels import (
    FLOAT_TYPES,
    INT_TYPES,
    MAX_THREADS_PER_GROUP,
    SCALAR_BYTES,
    SIMD_WIDTH,
    Kernel,
    check_kernels,
    parse_kernels,
)
from kforge_mcp.targets.source_map import Piece, map_pieces

COMPILER_MESSAGE = re.compile(r"program_source:(\d+):(\d+):\s*(error|warning|note):\s*(.*)")


def _target_names(targets: list[ast.expr]) -> set[str]:
    return {t.id if isinstance(t, ast.Name) else t.attr for t in targets if isinstance(t, (ast.Name, ast.Attribute))}


def _owner_name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _dims(value: Any) -> tuple | None:
    if value is None or isinstance(value, str):
        return None
    return tuple(value) if isinstance(value, tuple) else (value,)


@dataclass
class Library:
    names: set[str]  # variable or attribute names the compiled library is bound to
    msl: str | None
    call_line: int
    kernels: list[Kernel] = field(default_factory=list)
    piece: Piece | None = None
    compiled: Any = None  # torch's library, once compiled (on a Mac)

    def py_line(self, msl_line: int) -> int:
        if self.piece is not None and 0 < msl_line <= len(self.piece.lines):
            return self.piece.lines[msl_line - 1] or self.call_line
        return self.call_line


def _is_compile_shader(node: ast.AST) -> TypeGuard[ast.Call]:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Attribute) and f.attr == "compile_shader") or (
        isinstance(f, ast.Name) and f.id == "compile_shader"
    )


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
        if isinstance(f, ast.Attribute) and (owner := _owner_name(f.value)) in by_name:
            target = (by_name[owner], f.attr)
        elif (owner := _owner_name(f)) in aliases:
            target = aliases[owner]
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
    out: list[tuple[int, str, str]] = []
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
    for label, shape in (("threads", threads), ("group_size", group)):
        if shape is not None and (not 1 <= len(shape) <= 3 or any(not isinstance(d, int) or d < 1 for d in shape)):
            out.append((line, "error", f"{kname}: {label}={shape} must be a positive int or 1-3 positive ints"))
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
