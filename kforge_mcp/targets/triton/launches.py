"""The launches a Triton candidate makes, recorded while the problem's forward runs on CPU tensors
with kernels stubbed. Each launch is specialised by Triton's own binder for the target backend, so
compile() builds what a real launch builds: tensors 16-byte aligned and integers divisible by 16
get ``tt.divisibility``, integers equal to 1 become constexprs, tensor descriptors keep their block
shape, and num_warps/num_stages come from the launch or the autotune config.
"""

from __future__ import annotations

import contextlib
import inspect
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kforge_mcp.core.problem import Source

# Keyword arguments JITFunction.run adds for itself; a real launch never compiles with them set here.
RUNTIME_KWARGS = ("debug", "instrumentation_mode", "fpsan_homomorphic_casts", "ir_override")


@dataclass
class Launch:
    """One kernel specialisation to compile: argument types, constexpr values (keyed by argument
    name or by Triton's argument path), specialisation attributes, launch options, and the label of
    the autotune config it came from."""

    kernel: str
    signature: dict[str, str]
    constexprs: dict[Any, Any]
    options: dict[str, Any] = field(default_factory=dict)
    attrs: dict[tuple, list] = field(default_factory=dict)
    config: str | None = None

    def key(self) -> tuple:
        return (
            self.kernel,
            tuple(self.signature.items()),
            repr(sorted(self.constexprs.items(), key=repr)),
            repr(sorted(self.options.items())),
            repr(sorted(self.attrs.items())),
        )

    def arg_name(self, path: Any) -> str:
        """'BLOCK' for a name or (7,), 'pair[1]' for a path into a tuple argument."""
        if isinstance(path, str):
            return path
        names = list(self.signature)
        return names[path[0]] + "".join(f"[{i}]" for i in path[1:])

    def named_constexprs(self) -> dict[str, Any]:
        return {self.arg_name(k): v for k, v in self.constexprs.items()}

    def divisible_by_16(self) -> list[str]:
        return [self.arg_name(k) for k, v in self.attrs.items() if ["tt.divisibility", 16] in v]


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


def autotune_configs(module: types.ModuleType) -> dict[str, list]:
    """Kernel name -> the configs of the Autotuner that wraps it (Heuristics may sit in between)."""
    from triton.runtime.autotuner import Autotuner

    found = {}
    for value in vars(module).values():
        obj, seen = value, 0
        while obj is not None and seen < 8:
            if isinstance(obj, Autotuner):
                fn = _unwrap(obj)
                if fn is not None and getattr(fn.fn, "__module__", None) == module.__name__:
                    found[fn.__name__] = list(obj.configs)
                break
            obj, seen = getattr(obj, "fn", None), seen + 1
    return found


def config_label(config) -> str:
    """'BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3' (num_ctas and maxnreg when set)."""
    parts = [f"{k}={v}" for k, v in config.kwargs.items()]
    parts += [f"num_warps={config.num_warps}", f"num_stages={config.num_stages}"]
    for name in ("num_ctas", "maxnreg"):
        value = getattr(config, name, None)
        if value not in (None, 1):
            parts.append(f"{name}={value}")
    return ", ".join(parts)


def _def_line(fn) -> int:
    """Line of ``def`` in the submitted file (Triton's own offsets start at the decorator)."""
    lines, start = inspect.getsourcelines(fn.fn)
    for i, text in enumerate(lines):
        if text.lstrip().startswith("def "):
            return start + i
    return fn.fn.__code__.co_firstlineno


def specialise(fn, backend, args: tuple, kwargs: dict, binders: dict) -> Launch:
    """What JITFunction.run computes before it compiles: Triton's binder maps each argument to its
    type and specialisation key, then types, constexprs and attributes are packed as run packs them."""
    from triton.runtime.jit import create_function_from_signature, find_paths_if, get_iterable_path

    kwargs = {k: v for k, v in kwargs.items() if k not in RUNTIME_KWARGS}
    if fn not in binders:
        binders[fn] = create_function_from_signature(fn.signature, fn.params, backend)
    try:
        bound, specialization, options = binders[fn](*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"kernel {fn.__name__}: {str(e).replace('dynamic_func() ', '')}") from e
    sigvals = [s[0] for s in specialization]
    signature = dict(zip([p.name for p in fn.params], sigvals))
    paths = find_paths_if(sigvals, lambda _, v: v == "constexpr")
    constexprs = {p: get_iterable_path(list(bound.values()), p) for p in paths}
    attrvals = ["" if s[0] == "constexpr" else s[1] for s in specialization]
    attrs = {
        p: backend.parse_attr(get_iterable_path(attrvals, p))
        for p in find_paths_if(attrvals, lambda _, v: isinstance(v, str))
    }
    attrs = {p: a for p, a in attrs.items() if a}
    unknown = sorted(set(options) - set(backend.parse_options({}).__dict__))
    if unknown:
        raise TypeError(f"kernel {fn.__name__} launched with unknown keyword argument(s): {', '.join(unknown)}")
    return Launch(fn.__name__, signature, constexprs, options, attrs)


@contextlib.contextmanager
def recording_launches(launches: list[Launch], backend):
    """Make every kernel launch record its specialisation instead of running. Autotuned kernels
    record each config the autotuner would benchmark (after its pruning, with its pre_hook run, as
    a tensor-descriptor kernel's hook sets block shapes), so every variant it could pick is compiled."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    real_jit_run, real_tune_run = JITFunction.run, Autotuner.run
    binders: dict = {}
    current = {"config": None}

    def record(self, *args, grid, warmup, **kwargs):
        launch = specialise(self, backend, args, kwargs, binders)
        launch.config = current["config"]
        launches.append(launch)

    def record_configs(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        try:
            configs = self.prune_configs(kwargs) if len(self.configs) > 1 else self.configs
        except Exception:  # noqa: BLE001  (a perf model may want a GPU; then every config is a candidate)
            configs = self.configs
        for config in configs:
            full = {**kwargs, **config.all_kwargs()}
            if config.pre_hook:
                config.pre_hook({**self.nargs, **full})
            outer, current["config"] = current["config"], config_label(config)
            try:
                self.fn.run(*args, **full)
            finally:
                current["config"] = outer
        self.nargs = None

    JITFunction.run, Autotuner.run = record, record_configs
    try:
        yield
    finally:
        JITFunction.run, Autotuner.run = real_jit_run, real_tune_run


def trace_launches(module, problem: Source, workdir: Path, backend) -> list[Launch]:
    """Run one forward of ModelNew on the problem's CPU inputs with launches recorded."""
    import torch

    from kforge_mcp.core.problem import build_models, load_problem

    loaded = load_problem(problem, workdir)
    launches: list[Launch] = []
    with recording_launches(launches, backend), torch.no_grad():
        _, candidate = build_models(loaded, module, "cpu", build_reference=False)
        candidate(*loaded.make_inputs(seed=0, device="cpu"))
    return launches
