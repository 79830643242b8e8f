"""Triton: kernels written with ``@triton.jit`` and launched from ``ModelNew.forward``.

Runs on CUDA or XPU devices when present, otherwise through Triton's interpreter on CPU
tensors (the worker sets TRITON_INTERPRET=1 for its CPU lane). ``compile`` works without
a GPU: each launched kernel is compiled ahead of time to PTX and cubin for the chosen arch,
and its registers, spills and shared memory come from the bundled cuobjdump.
"""

from __future__ import annotations

import ast
import contextlib
import re
import subprocess
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..problem import Source
from ..schemas import CompileReport, Diagnostic, Finding, KernelResources, TargetStatus
from ..source import SourceRuntimeError, diagnostics_from_exception, import_source
from .base import dist_version, find_tool, xpu_unavailable_reason

DEFAULT_ARCH = "sm_90a"
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


@dataclass
class LaunchCount:
    count: int = 0


def parse_arch(arch: str | None) -> int:
    """'sm_90a', 'sm_90', '90', 'sm_100a' -> compute capability as Triton wants it (90, 100)."""
    m = re.fullmatch(r"(?:sm_)?(\d{2,3})a?", (arch or DEFAULT_ARCH).strip().lower())
    if not m:
        raise InputError(f"arch '{arch}' is not an NVIDIA arch such as sm_80, sm_90a or sm_100a")
    return int(m.group(1))


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


def _called_names(fn) -> set[str]:
    tree = ast.parse(fn.src)
    return {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)} | {
        n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    }


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


def cubin_resources(cubin: bytes) -> dict[str, dict[str, int]]:
    """Parse ``cuobjdump --dump-resource-usage``: REG, STACK, SHARED, LOCAL per function."""
    tool = find_tool("cuobjdump", prefer_triton_bundle=True)
    if tool is None:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True, timeout=60).stdout
    result, current = {}, None
    for line in out.splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            current = result.setdefault(m.group(1), {})
        elif current is not None:
            current.update({k: int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", line)})
    return result


def compile_error_diagnostics(exc: BaseException, kernels: dict[str, Any], source: Source) -> list[Diagnostic]:
    """Triton's CompilationError carries an AST node whose line counts from the kernel's
    ``def``; walk the cause chain (a helper's error is the cause of its caller's) and map
    each to the submitted file. The innermost is the error; callers become notes."""
    from triton.compiler.errors import CompilationError

    by_src = {fn.src: fn for fn in kernels.values()}
    chain = []
    e: BaseException | None = exc
    while isinstance(e, CompilationError):
        chain.append(e)
        e = e.__cause__
    diags = []
    for i, err in enumerate(reversed(chain)):
        fn = by_src.get(err.src)
        node = getattr(err, "node", None)
        line = col = None
        if fn is not None and node is not None and hasattr(node, "lineno"):
            def_line = _def_line(fn)
            line = def_line + node.lineno - 1
            indent = len(source.text.splitlines()[def_line - 1]) - len(source.text.splitlines()[def_line - 1].lstrip())
            col = node.col_offset + indent + 1
        message = err.error_message or str(err).strip().splitlines()[-1]
        if i > 0:
            message = f"in a call from kernel {fn.__name__ if fn else '?'}: {message}"
        diags.append(
            Diagnostic(
                line=line,
                column=col,
                severity="error" if i == 0 else "note",
                message=message,
                file=source.name,
                kernel=fn.__name__ if fn else None,
            )
        )
    if not diags:
        diags = [Diagnostic(message=f"{type(exc).__name__}: {str(exc).strip()[-2000:]}", file=source.name)]
    return diags


class TritonTarget:
    name = "triton"
    summary = "Triton kernels (@triton.jit): NVIDIA and Intel XPU GPUs, or the CPU interpreter"

    def probe(self, devices: list[str]) -> TargetStatus:
        version = dist_version("triton") or dist_version("pytorch-triton-xpu") or dist_version("pytorch-triton")
        versions = {k: v for k, v in {"triton": version, "torch": dist_version("torch")}.items() if v}
        if version is None:
            return TargetStatus(
                name=self.name,
                available=False,
                reason="triton is not installed (pip install triton)",
                versions=versions,
            )
        gpus = [d for d in devices if d.startswith(("cuda", "xpu"))]
        notes = []
        if not gpus:
            notes.append(
                "no GPU found: kernels run through Triton's interpreter on CPU (correctness only; timings are not representative)"
            )
        can_compile = any(find_tool(t, prefer_triton_bundle=True) for t in ("cuobjdump", "ptxas"))
        if can_compile:
            notes.append(f"compile: ahead of time to PTX and cubin for any NVIDIA arch (default {DEFAULT_ARCH})")
        missing = {}
        if not any(d.startswith("xpu") for d in devices):
            missing["xpu"] = xpu_unavailable_reason() or "no Intel GPU found by torch.xpu"
        return TargetStatus(
            name=self.name,
            available=True,
            devices=gpus + ["cpu"],
            can_compile=can_compile,
            versions=versions,
            notes=notes,
            unavailable_devices=missing,
        )

    def check(self, source: Source) -> list[Finding]:
        try:
            tree = ast.parse(source.text)
        except SyntaxError:
            return []  # reported as a diagnostic where the source is loaded
        decorated = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in n.decorator_list)
        ]
        if not decorated:
            return [Finding(code="no_triton_kernel", message="the candidate defines no @triton.jit kernel")]
        return []

    def execution(self, device: str) -> str:
        return "triton-interpreter" if device == "cpu" else device.split(":")[0]

    @contextlib.contextmanager
    def launch_counter(self):
        """Count launches of the candidate's Triton kernels. Torch functions called inside a
        launch (the launcher's, the interpreter's) are Triton's, not the candidate's, so they
        are hidden from torch-function recorders."""
        import torch
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        counter = LaunchCount()
        real = {cls: cls.run for cls in (JITFunction, InterpretedFunction)}

        def counting(cls):
            def run(self, *args, **kwargs):
                if not kwargs.get("warmup"):
                    counter.count += 1
                with torch._C.DisableTorchFunction():
                    return real[cls](self, *args, **kwargs)

            return run

        for cls in real:
            cls.run = counting(cls)
        try:
            yield counter
        finally:
            for cls, fn in real.items():
                cls.run = fn

    def load(self, source: Source, device: str, workdir: Path) -> types.ModuleType:
        return import_source(source, workdir, "candidate")

    def compile(self, source: Source, arch: str | None, problem: Source | None, workdir: Path) -> CompileReport:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        started = time.perf_counter()
        arch = arch or DEFAULT_ARCH
        capability = parse_arch(arch)
        report = CompileReport(ok=False, target=self.name, arch=arch)
        try:
            module = import_source(source, workdir, "candidate")
        except (InputError, SourceRuntimeError) as e:
            report.diagnostics = e.diagnostics
            report.seconds = time.perf_counter() - started
            return report
        kernels = jit_functions(module)
        if not kernels:
            report.diagnostics = [Diagnostic(message="no @triton.jit kernel found in the source", file=source.name)]
            return report
        diags: list[Diagnostic] = []
        if problem is not None:
            try:
                launches = trace_launches(module, problem, workdir)
                report.signature_source = "traced"
            except (InputError, SourceRuntimeError):
                raise
            except Exception as e:
                diags += diagnostics_from_exception(e, Path(module.__file__), source)
                diags[-1].message = "tracing ModelNew.forward on the problem's inputs failed: " + diags[-1].message
                report.diagnostics = diags
                return report
            if not launches:
                diags.append(
                    Diagnostic(
                        severity="warning",
                        file=source.name,
                        message="ModelNew.forward launched no Triton kernel on the problem's inputs",
                    )
                )
        else:
            launches, diags = infer_launches(kernels, source.text)
            report.signature_source = "inferred"
        seen, ok = set(), True
        for launch in launches:
            if launch.key() in seen:
                continue
            seen.add(launch.key())
            fn = kernels.get(launch.kernel)
            try:
                src = ASTSource(fn, launch.signature, constexprs={k: v for k, v in launch.constexprs.items()})
                compiled = triton.compile(src, target=GPUTarget("cuda", capability, 32), options=dict(launch.options))
            except Exception as e:
                ok = False
                diags += compile_error_diagnostics(e, kernels, source)
                continue
            usage = cubin_resources(compiled.asm["cubin"]).get(compiled.name, {})
            report.kernels.append(
                KernelResources(
                    name=launch.kernel,
                    registers=usage.get("REG"),
                    spills=usage.get("LOCAL"),
                    shared_bytes=compiled.metadata.shared,
                    stack_bytes=usage.get("STACK"),
                    num_warps=compiled.metadata.num_warps,
                    num_stages=compiled.metadata.num_stages,
                    signature=launch.signature,
                    constexprs={k: repr(v) for k, v in launch.constexprs.items()},
                )
            )
            report.ptx = (report.ptx or {}) | {launch.kernel: compiled.asm["ptx"]}
        report.ok = ok and not any(d.severity == "error" for d in diags)
        report.diagnostics = diags
        report.seconds = time.perf_counter() - started
        return report
