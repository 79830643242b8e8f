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

Beside it: metal_kernels.py (the MSL kernels and Apple's limits), metal_calls.py (the dispatches
and the compiler's messages).
"""

from __future__ import annotations

import ast
import contextlib
import platform
import re
import time
import types
from dataclasses import dataclass
from pathlib import Path

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.problem import Source
from kforge_mcp.core.schemas import CompileReport, Diagnostic, Finding, KernelResources, TargetStatus
from kforge_mcp.core.source import SourceRuntimeError, import_source
from kforge_mcp.targets.base import Loaded, Target, dist_version
from kforge_mcp.targets.metal.calls import (
    Library,
    _module_constants,
    compiler_diagnostics,
    find_libraries,
    static_diagnostics,
)
from kforge_mcp.targets.metal.kernels import Kernel, parse_kernels
from kforge_mcp.targets.source_map import map_pieces

REQUIRES = "metal"  # the resource a machine must have to run this target (executors route on it)
MIN_TORCH = (2, 7)  # torch.mps.compile_shader became public in 2.7
NEEDS = "needs macOS with an Apple GPU and torch >= 2.7 (torch.mps.compile_shader)"


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


class MetalTarget(Target):
    name = "metal"
    summary = "Metal Shading Language kernels through torch.mps.compile_shader (Apple GPUs)"
    title = "Metal"
    order = 3
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
        # compiling takes the source positionally, torch's function also by keyword (`source`)
        torch.mps.compile_shader = compiling  # type: ignore[assignment]
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

    def load(self, source: Source, device: str, workdir: Path) -> Loaded:
        if device != "mps":
            raise InputError(f"target 'metal' runs on device 'mps', not '{device}'")
        module, _, _ = self._import(source, workdir)
        return Loaded(module)


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
