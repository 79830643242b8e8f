"""Triton: kernels written with ``@triton.jit`` and launched from ``ModelNew.forward``.

Runs on CUDA or XPU devices when present, otherwise through Triton's interpreter on CPU
tensors (the worker sets TRITON_INTERPRET=1 for its CPU lane). ``compile`` works without
a GPU: each launched kernel is compiled ahead of time to PTX and cubin for the chosen arch,
and its registers, spills and shared memory come from the bundled cuobjdump.
"""

from __future__ import annotations

import ast
import contextlib
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kforge_mcp.core.problem import Source
from kforge_mcp.core.schemas import CompileReport, Finding, TargetStatus
from kforge_mcp.core.source import import_source
from kforge_mcp.targets.base import Loaded, Target, dist_version, xpu_unavailable_reason
from kforge_mcp.targets.nvidia import PtxasUnavailable, find_tool, polynomial_logs, wgmma_serialized
from kforge_mcp.targets.triton.compile import DEFAULT_ARCH, compile_candidate
from kforge_mcp.targets.triton.launches import jit_functions


@dataclass
class LaunchCount:
    count: int = 0
    # told of each launch once it ran (its kernel name and arguments): profiling/weight_work follows the data
    observer: Any = None


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
        # "compile" changes when reports change meaning, so cached reports of older builds are not served
        return {"triton": dist_version("triton") or "-", "compile": "launch-specialised"}

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
                launch = not kwargs.get("warmup")
                observer = counter.observer if launch else None
                if launch:
                    counter.count += 1
                with torch._C.DisableTorchFunction():
                    result = real[cls](self, *args, **kwargs)
                    if observer is not None:
                        observer.launched(getattr(self, "__name__", "kernel"), args + tuple(kwargs.values()))
                return result

            return run

        for cls in real:
            cls.run = counting(cls)
        try:
            yield counter
        finally:
            for cls, fn in real.items():
                cls.run = fn

    def emulate_precision(self, device: str):
        return interpreted() if self.execution(device) == "triton-interpreter" else contextlib.nullcontext()

    def load(self, source: Source, device: str, workdir: Path) -> Loaded:
        return Loaded(import_source(source, workdir, "candidate"))

    def compile(self, source: Source, arch: str | None, problem: Source | None, workdir: Path) -> CompileReport:
        return compile_candidate(source, arch, problem, workdir)


@contextlib.contextmanager
def interpreted():
    """Under the interpreter: tl.dot rounded as a GPU rounds it (it computes in fp32 whatever it is asked), and
    autotuned kernels run on their first config that runs (it cannot time configs); both say so in findings()."""
    from kforge_mcp.targets.triton.interpreter_autotune import first_config_that_runs
    from kforge_mcp.targets.triton.precision import emulated_dot

    with emulated_dot() as dots, first_config_that_runs() as configs:
        yield types.SimpleNamespace(findings=lambda: dots.findings() + configs.findings())


def note_serialized(report, k, fname: str, ptx: str) -> None:
    """The kernel's wgmma_serialized metric (1: ptxas serialized its wgmma, with the reason in the notes); unset,
    with the reason, where ptxas cannot run here."""
    try:
        why = wgmma_serialized(ptx)
    except PtxasUnavailable as e:
        report.notes.append(f"{fname}: could not ask ptxas whether its wgmma are serialized ({e})")
        return
    k.metrics["wgmma_serialized"] = 1.0 if why else 0.0
    if why:
        report.notes.append(f"{fname}: ptxas serialized its wgmma ({why})")


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
                        k.metrics["ptx_polynomial_logs"] = float(polynomial_logs(ptx))  # the epilogue rule's
                    if "wgmma.mma_async" in ptx:  # whether ptxas serialized them, and why (a note)
                        note_serialized(report, k, fname, ptx)
        except Exception:  # noqa: BLE001  (metadata is a bonus; Triton's internals move between versions)
            continue
