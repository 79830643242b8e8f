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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..problem import Source
from ..schemas import CompileReport, Diagnostic, Finding, KernelResources, TargetStatus
from ..source import SourceRuntimeError, diagnostics_from_exception, import_source
from .base import Target, dist_version, find_tool, xpu_unavailable_reason
from .triton_launches import _def_line, infer_launches, jit_functions, trace_launches

DEFAULT_ARCH = "sm_90a"


@dataclass
class LaunchCount:
    count: int = 0


def parse_arch(arch: str | None) -> int:
    """'sm_90a', 'sm_90', '90', 'sm_100a' -> compute capability as Triton wants it (90, 100)."""
    m = re.fullmatch(r"(?:sm_)?(\d{2,3})a?", (arch or DEFAULT_ARCH).strip().lower())
    if not m:
        raise InputError(f"arch '{arch}' is not an NVIDIA arch such as sm_80, sm_90a or sm_100a")
    return int(m.group(1))


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


class TritonTarget(Target):
    name = "triton"
    summary = "Triton kernels (@triton.jit): NVIDIA and Intel XPU GPUs, or the CPU interpreter"
    title = "Triton"
    order = 2

    def profile_details(self, report, module: types.ModuleType, device: str) -> None:
        if device != "cpu":  # the interpreter compiles nothing
            attach_compiled_metadata(report, module)

    def prompt_facts(self, status: TargetStatus) -> list[str]:
        if status.devices and all(d == "cpu" for d in status.devices):
            return [
                "Kernels run under Triton's CPU interpreter (TRITON_INTERPRET=1): correctness is exact, "
                "timings are not GPU timings."
            ]
        return []

    def cache_versions(self) -> dict[str, str]:
        return {"triton": dist_version("triton") or "-"}

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

    def emulate_precision(self, device: str):
        from .triton_precision import emulated_dot  # the interpreter computes tl.dot in fp32 whatever it is asked

        return emulated_dot() if self.execution(device) == "triton-interpreter" else contextlib.nullcontext()

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


def attach_compiled_metadata(report, module) -> None:
    """Registers, spills, warps, stages and shared memory of each kernel Triton compiled, from its JIT cache."""
    by_name = {k.name: k for k in report.kernels}
    for fname, fn in jit_functions(module).items():
        k = by_name.get(fname)
        if k is None:
            continue
        try:
            for cache in (getattr(fn, "device_caches", {}) or {}).values():
                kernels = cache[0] if isinstance(cache, tuple) else cache
                for compiled in list(kernels.values())[:1]:
                    md = compiled.metadata
                    k.num_warps = getattr(md, "num_warps", None)
                    k.num_stages = getattr(md, "num_stages", None)
                    if k.shared_bytes is None:
                        k.shared_bytes = getattr(md, "shared", None)
                    k.spills = getattr(compiled, "n_spills", None)
                    if k.registers is None:
                        k.registers = getattr(compiled, "n_regs", None)
                    ptx = (getattr(compiled, "asm", None) or {}).get("ptx") or ""
                    if ptx:  # the unit the math runs on, for a timeline without pipe metrics
                        k.metrics["ptx_mma"] = 2.0 if "wgmma.mma_async" in ptx else 1.0 if "mma.sync" in ptx else 0.0
        except Exception:  # noqa: BLE001  (metadata is a bonus; Triton's internals move between versions)
            continue
