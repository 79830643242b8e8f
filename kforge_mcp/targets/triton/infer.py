"""Kernel signatures guessed from the source alone, for ``compile`` without a problem to trace:
pointers are fp32, other arguments i32, constexprs take the value at the launch site, else their
default, else a guess. Triton's launch-time specialisation (divisibility by 16, integers equal to
1) cannot be known without a launch, so the report says its figures are for unspecialised kernels.
"""

from __future__ import annotations

import ast
from typing import Any

from kforge_mcp.core.schemas import Diagnostic
from kforge_mcp.targets.triton.launches import Launch, _def_line, config_label

GUESSED_CONSTEXPR = 64  # a power of two, so tl.arange accepts it

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")

POINTER_USES = {"load", "store", "make_block_ptr", "make_tensor_descriptor"}

# Methods called on a tensor-descriptor argument inside a kernel.
DESCRIPTOR_METHODS = {"load", "store", "gather", "scatter", "atomic_add", "atomic_min", "atomic_max", "reduce"}

UNSPECIALISED_NOTE = (
    "signatures inferred from the source (no problem given): pointers compiled as fp32 and integers "
    "as i32, without the specialisation a launch applies (16-byte alignment, integers divisible by 16, "
    "integers equal to 1), so registers and spills may differ from the launched kernel. Pass `problem` "
    "to compile what a launch on its inputs builds"
)


def _pointer_base(expr: ast.expr) -> str | None:
    """The pointer in ``x_ptr + row * stride + cols`` is the leftmost operand of the sum."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)):
        return _pointer_base(expr.left) or _pointer_base(expr.right)
    return None


def _pointer_params(fn) -> set[str]:
    """Parameters at the base of tl.load / tl.store / block-pointer addresses, or named like pointers."""
    names = {p.name for p in fn.params if "ptr" in p.name.lower()}
    for node in ast.walk(ast.parse(fn.src)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in POINTER_USES:
            first = (
                node.args[0]
                if node.args
                else next((k.value for k in node.keywords if k.arg in ("pointer", "base")), None)
            )
            base = _pointer_base(first) if first is not None else None
            if base:
                names.add(base)
    return names


def _descriptor_params(fn) -> list[str]:
    """Parameters used as host-side tensor descriptors: ``x_desc.load([m, k])``."""
    params = {p.name for p in fn.params}
    used = {
        node.func.value.id
        for node in ast.walk(ast.parse(fn.src))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in DESCRIPTOR_METHODS
        and isinstance(node.func.value, ast.Name)
    }
    return [p.name for p in fn.params if p.name in used & params]


def launch_site_constants(module_source: str) -> dict[str, dict[str, Any]]:
    """Constexpr values written at launch sites, ``kernel[grid](..., BLOCK=1024)`` or
    ``BLOCK=BLOCK`` where ``BLOCK = 1024`` is assigned in the file: kernel -> name -> value."""
    tree = ast.parse(module_source)
    assigned: dict[str, Any] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        for t in node.targets:  # BLOCK = 128, or BLOCK_M, BLOCK_N = 128, 64
            pairs = (
                zip(t.elts, node.value.elts)
                if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple)
                else [(t, node.value)]
            )
            assigned |= {n.id: v.value for n, v in pairs if isinstance(n, ast.Name) and isinstance(v, ast.Constant)}
    found: dict[str, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
            callee = node.func.value
            name = callee.id if isinstance(callee, ast.Name) else getattr(callee, "attr", None)
            for kw in node.keywords:
                if name is None or kw.arg is None:  # no kernel name, or **kwargs: nothing a lookup could find
                    continue
                if isinstance(kw.value, ast.Constant):
                    found.setdefault(name, {})[kw.arg] = kw.value.value
                elif isinstance(kw.value, ast.Name) and kw.value.id in assigned:
                    found.setdefault(name, {})[kw.arg] = assigned[kw.value.id]
    return found


def _config_options(config) -> dict[str, Any]:
    return {k: getattr(config, k) for k in LAUNCH_OPTIONS if getattr(config, k, None) is not None}


def infer_launches(
    kernels: dict[str, Any], configs: dict[str, list], module_source: str
) -> tuple[list[Launch], list[Diagnostic]]:
    """One launch per kernel, or one per autotune config of an autotuned kernel. Helpers called
    from other kernels are not compiled on their own; kernels that take tensor descriptors are not
    compiled at all (their block shape exists only at a launch) and get a warning instead."""
    helpers = set().union(*(_called_names(fn) for fn in kernels.values())) if kernels else set()
    at_launch = launch_site_constants(module_source)
    launches, diags = [], [Diagnostic(severity="note", message=UNSPECIALISED_NOTE)]
    for name, fn in kernels.items():
        if name in helpers:
            continue
        descriptors = _descriptor_params(fn)
        if descriptors:
            diags.append(
                Diagnostic(
                    line=_def_line(fn),
                    severity="warning",
                    kernel=name,
                    message=f"kernel {name} takes tensor descriptor argument(s) {', '.join(descriptors)}: "
                    "their dtype and block shape exist only at a launch, so it was not compiled. Pass "
                    "`problem` so kforge traces the real launch",
                )
            )
            continue
        pointers = _pointer_params(fn)
        for config in configs.get(name) or [None]:
            tuned = dict(config.kwargs) if config is not None else {}
            signature, constexprs, guessed = {}, {}, []
            for p in fn.params:
                default = p._param.default
                if p.is_constexpr:
                    signature[p.name] = "constexpr"
                    if p.name in tuned:
                        constexprs[p.name] = tuned[p.name]
                    elif p.name in at_launch.get(name, {}):
                        constexprs[p.name] = at_launch[name][p.name]
                    elif default is not p._param.empty:
                        constexprs[p.name] = default
                    else:
                        constexprs[p.name] = GUESSED_CONSTEXPR
                        guessed.append(p.name)
                elif p.annotation_type:
                    signature[p.name] = p.annotation_type
                else:
                    signature[p.name] = "*fp32" if p.name in pointers else "i32"
            site = {k: v for k, v in at_launch.get(name, {}).items() if k in LAUNCH_OPTIONS}
            options = _config_options(config) if config is not None else site
            label = config_label(config) if config is not None else None
            launches.append(Launch(name, signature, constexprs, options, config=label))
            if guessed and not any(d.kernel == name and d.severity == "note" for d in diags):
                diags.append(
                    Diagnostic(
                        line=_def_line(fn),
                        severity="note",
                        kernel=name,
                        message=f"kernel {name}: constexpr {', '.join(guessed)} has no default and no constant "
                        f"at the launch site; compiled with {GUESSED_CONSTEXPR}. Pass `problem` so "
                        "kforge traces the real launch values",
                    )
                )
    return launches, diags


def _called_names(fn) -> set[str]:
    tree = ast.parse(fn.src)
    return {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)} | {
        n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    }
