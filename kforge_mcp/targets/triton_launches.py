"""The launches a Triton candidate makes, found without a GPU: recorded while the problem's forward
runs (with kernels stubbed), or inferred from the launch sites in the source. compile() needs them
to build each kernel for its real argument types.
"""

from __future__ import annotations

import ast
import contextlib
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..problem import Source
from ..schemas import Diagnostic

GUESSED_CONSTEXPR = 64  # a power of two, so tl.arange accepts it


LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


POINTER_USES = {"load", "store", "make_block_ptr", "make_tensor_descriptor"}


TORCH_TO_TRITON = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float64": "fp64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "bool": "i1",
    "float8_e4m3fn": "fp8e4nv",
    "float8_e5m2": "fp8e5",
}


@dataclass
class Launch:
    """One kernel specialization to compile: argument types, constexpr values, launch options."""

    kernel: str
    signature: dict[str, str]
    constexprs: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)

    def key(self) -> tuple:
        return (
            self.kernel,
            tuple(self.signature.items()),
            repr(sorted(self.constexprs.items())),
            repr(sorted(self.options.items())),
        )


def _unwrap(obj: Any) -> Any:
    """Autotuner and Heuristics wrap the JITFunction in ``.fn``."""
    from triton.runtime.jit import JITFunction

    seen = 0
    while not isinstance(obj, JITFunction) and hasattr(obj, "fn") and seen < 8:
        obj, seen = obj.fn, seen + 1
    return obj if isinstance(obj, JITFunction) else None


def jit_functions(module: types.ModuleType) -> dict[str, Any]:
    found = {}
    for value in vars(module).values():
        fn = _unwrap(value)
        if fn is not None and getattr(fn.fn, "__module__", None) == module.__name__:
            found[fn.__name__] = fn
    return found


def _def_line(fn) -> int:
    """Line of ``def`` in the submitted file (Triton's own offsets start at the decorator)."""
    code = fn.fn.__code__
    import inspect

    lines, start = inspect.getsourcelines(fn.fn)
    for i, text in enumerate(lines):
        if text.lstrip().startswith("def "):
            return start + i
    return code.co_firstlineno


def _kernel_arg_type(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        name = str(value.dtype).removeprefix("torch.")
        if name not in TORCH_TO_TRITON:
            raise TypeError(f"tensor dtype {value.dtype} has no Triton pointer type")
        return "*" + TORCH_TO_TRITON[name]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"cannot type kernel argument of type {type(value).__name__}")


def launch_from_call(fn, args: tuple, kwargs: dict) -> Launch:
    options = {k: kwargs.pop(k) for k in LAUNCH_OPTIONS if k in kwargs and kwargs[k] is not None}
    for k in ("debug", "instrumentation_mode", "fpsan_homomorphic_casts", "ir_override"):
        kwargs.pop(k, None)
    bound = dict(zip(fn.arg_names, args))
    bound.update(kwargs)
    signature, constexprs = {}, {}
    for p in fn.params:
        if p.name not in bound:
            default = p._param.default
            if default is p._param.empty:
                raise TypeError(f"kernel {fn.__name__} launched without argument '{p.name}'")
            bound[p.name] = default
        value = bound[p.name]
        if p.is_constexpr or value is None:
            signature[p.name] = "constexpr"
            constexprs[p.name] = value
        else:
            signature[p.name] = _kernel_arg_type(value)
    return Launch(fn.__name__, signature, constexprs, options)


@contextlib.contextmanager
def recording_launches(kernels: dict[str, Any], launches: list[Launch]):
    """Make every kernel launch record its specialization instead of running. Autotuned
    kernels record every config, so each variant the autotuner could pick is compiled."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    real_jit_run, real_tune_run = JITFunction.run, Autotuner.run

    def record(self, *args, grid, warmup, **kwargs):
        launches.append(launch_from_call(self, args, dict(kwargs)))

    def record_configs(self, *args, **kwargs):
        for config in self.configs:
            self.fn.run(*args, **kwargs, **config.all_kwargs())

    JITFunction.run, Autotuner.run = record, record_configs
    try:
        yield
    finally:
        JITFunction.run, Autotuner.run = real_jit_run, real_tune_run


def trace_launches(module, problem: Source, workdir: Path) -> list[Launch]:
    """Run one forward of ModelNew on the problem's CPU inputs with launches recorded."""
    import torch

    from ..problem import build_models, load_problem

    loaded = load_problem(problem, workdir)
    launches: list[Launch] = []
    with recording_launches(jit_functions(module), launches), torch.no_grad():
        _, candidate = build_models(loaded, module, "cpu", build_reference=False)
        candidate(*loaded.make_inputs(seed=0, device="cpu"))
    return launches


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


def launch_site_constants(module_source: str) -> dict[str, dict[str, Any]]:
    """Constexpr values written at launch sites, ``kernel[grid](..., BLOCK=1024)`` or
    ``BLOCK=BLOCK`` where ``BLOCK = 1024`` is assigned in the file: kernel -> name -> value."""
    tree = ast.parse(module_source)
    assigned = {
        t.id: node.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    found: dict[str, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
            callee = node.func.value
            name = callee.id if isinstance(callee, ast.Name) else getattr(callee, "attr", None)
            for kw in node.keywords:
                if isinstance(kw.value, ast.Constant):
                    found.setdefault(name, {})[kw.arg] = kw.value.value
                elif isinstance(kw.value, ast.Name) and kw.value.id in assigned:
                    found.setdefault(name, {})[kw.arg] = assigned[kw.value.id]
    return found


def infer_launches(kernels: dict[str, Any], module_source: str) -> tuple[list[Launch], list[Diagnostic]]:
    """Without a problem to trace: pointers are fp32, other arguments i32, constexprs take
    the value at the launch site, else their default, else a guess (64) that is reported.
    Helpers called from other kernels are not compiled on their own."""
    helpers = set().union(*(_called_names(fn) for fn in kernels.values())) if kernels else set()
    at_launch = launch_site_constants(module_source)
    launches, diags = [], []
    for name, fn in kernels.items():
        if name in helpers:
            continue
        pointers = _pointer_params(fn)
        signature, constexprs, guessed = {}, {}, []
        for p in fn.params:
            default = p._param.default
            if p.is_constexpr:
                signature[p.name] = "constexpr"
                if p.name in at_launch.get(name, {}):
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
        if guessed:
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
        launches.append(Launch(name, signature, constexprs))
    return launches, diags


def _called_names(fn) -> set[str]:
    tree = ast.parse(fn.src)
    return {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)} | {
        n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    }
