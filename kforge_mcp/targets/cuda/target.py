"""CUDA C++ in KernelBench's form: Python that builds its kernels with
``torch.utils.cpp_extension.load_inline(name=..., cpp_sources=..., cuda_sources=..., functions=[...])``.

``compile`` never runs the candidate's build. The candidate is imported with ``load_inline``
swapped for a recorder, so module-level code runs and the CUDA strings it passes are
captured; each string is found again in the submitted file (``ast``) and written to a ``.cu``
with ``#line`` directives, so nvcc's messages point at lines of the Python file. nvcc then
compiles device code only (``-cubin``, ``-Xptxas -v``) for the chosen arch, without a GPU:

- the lean path (default) swaps torch's headers for a small stand-in (cuda_lean_header.py),
  a few seconds instead of a minute or more of parsing torch's headers;
- the full path uses torch's real headers; it runs when the lean path fails on something it
  cannot judge (host glue, a torch type), so a gap in the stand-in never becomes a false error.

``load`` (GPU only) runs the real ``load_inline``, with the same ``#line`` directives, in a
build directory keyed by source, flags, toolchain and arch, under a file lock.

Beside it: cuda_build.py (the captured builds), cuda_source.py (strings back to lines), nvcc.py
(running nvcc and reading what it says); cute.py reuses all three.
"""

from __future__ import annotations

import re
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.problem import Source
from kforge_mcp.core.schemas import CompileReport, Diagnostic, Finding, KernelResources, TargetStatus
from kforge_mcp.core.source import SourceRuntimeError
from kforge_mcp.devices.driver_probe import torch_build
from kforge_mcp.platforms.nvidia.compile_checks import DEFAULT_ARCH, normalize_arch
from kforge_mcp.targets.base import Loaded, Target, dist_version
from kforge_mcp.targets.cuda.build import (
    CUTLASS_HEADER,
    InlineBuild,
    capture_builds,
    cutlass_include_dir,
    extension_cache_dir,
)
from kforge_mcp.targets.cuda.build_plan import cpu_torch_flags
from kforge_mcp.targets.cuda.fast_build import BuildInfo, start_pch_prewarm
from kforge_mcp.targets.cuda.lean_header import TORCH_LEAN_H
from kforge_mcp.targets.cuda.load import check_host_unit, load_candidate
from kforge_mcp.targets.cuda.nvcc import (
    NvccRun,
    binding_diagnostics,
    build_errors,
    cubin_sass,
    demangle,
    in_host_glue,
    lean_errors_trusted,
    parse_compiler_output,
    parse_ptxas_resources,
    run_nvcc,
    to_diagnostics,
    usable_flags,
)
from kforge_mcp.targets.cuda.source import top_level_blocks
from kforge_mcp.targets.nvidia import NEEDS_GPU, find_tool, tool_version
from kforge_mcp.targets.source_map import Piece, map_pieces

TORCH_HEADER = re.compile(
    r'^[ \t]*#[ \t]*include[ \t]*[<"](torch/|ATen/|c10/|pybind11/|THC/|Python\.h)[^>"]*[>"]', re.M
)
# load_inline puts these before the CUDA sources; the full path does the same
LOAD_INLINE_CUDA_PREFIX = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"


# ---- toolchain ----


def torch_include_dirs() -> list[str]:
    from torch.utils.cpp_extension import include_paths

    return [*include_paths(), sysconfig.get_paths()["include"]]


# flags that only make sense for a real build, or that nvcc -cubin refuses


# ---- the target ----


def _cutlass_includes(pieces, build: InlineBuild, source: Source, diags: list[Diagnostic]) -> list[str]:
    """CUTLASS's include dir where the pieces include CuTe/CUTLASS headers; a warning in ``diags`` when it is
    not installed."""
    includes = []
    uses_cutlass = any(CUTLASS_HEADER.search(p.text) for p in pieces)
    if uses_cutlass:
        inc = cutlass_include_dir()
        if inc:
            includes.append(inc)
        else:
            diags.append(
                Diagnostic(
                    severity="warning",
                    file=source.name,
                    line=build.call_line,
                    message="the source includes CuTe/CUTLASS headers but nvidia-cutlass is not "
                    "installed (pip install nvidia-cutlass)",
                )
            )
    return includes


class CudaTarget(Target):
    name = "cuda"
    summary = "CUDA C++ through torch.utils.cpp_extension.load_inline (KernelBench form)"
    title = "CUDA C++"
    order = 0
    builds_ahead = True

    def cache_versions(self) -> dict[str, str]:
        # CuTe C++ headers it may include; Triton's bundled ptxas and cuobjdump where no toolkit is
        return {d: dist_version(d) or "-" for d in ("nvidia-cutlass", "triton")}

    def probe(self, devices: list[str]) -> TargetStatus:
        build = torch_build() or {}  # not torch itself: a fresh home's probe must not wait for its import
        nvcc = find_tool("nvcc")
        versions = {
            k: v
            for k, v in {
                "nvcc": tool_version("nvcc"),
                "torch": build.get("__version__"),
                "torch cuda": build.get("cuda"),
            }.items()
            if v
        }
        gpus = [d for d in devices if d.startswith("cuda")]
        notes = []
        if nvcc:
            notes.append(
                f"compile: nvcc -cubin for any NVIDIA arch (default {DEFAULT_ARCH}), no GPU needed; kernels "
                "compile against a lean stand-in for torch's headers (seconds), falling back to the real "
                "headers (~1-5 min on a small CPU) when host code needs judging"
            )
        if cutlass_include_dir():
            notes.append("CuTe / CUTLASS C++ headers (nvidia-cutlass) are on the include path")
        if nvcc is None:
            reason = "nvcc not found: install the CUDA toolkit (or set CUDA_HOME)"
            return TargetStatus(name=self.name, available=False, reason=reason, versions=versions, notes=notes)
        if not gpus:
            return TargetStatus(
                name=self.name, available=False, reason=NEEDS_GPU, can_compile=True, versions=versions, notes=notes
            )
        if not build.get("cuda"):
            return TargetStatus(
                name=self.name,
                available=False,
                can_compile=True,
                versions=versions,
                notes=notes,
                reason="this torch build has no CUDA support; install a CUDA build of torch",
            )
        settings = self.settings
        if settings.split_cuda_builds and settings.cuda_pch_on:
            # torch's headers precompiled while the host starts up, before the first build needs them
            start_pch_prewarm(extension_cache_dir())
        return TargetStatus(
            name=self.name, available=True, devices=gpus, can_compile=True, versions=versions, notes=notes
        )

    def check(self, source: Source) -> list[Finding]:
        if "load_inline" not in source.text:
            return [
                Finding(
                    code="no_load_inline",
                    message="the candidate never calls torch.utils.cpp_extension.load_inline: a CUDA candidate "
                    "builds its kernels with load_inline(cpp_sources=..., cuda_sources=..., functions=[...])",
                )
            ]
        return []

    def execution(self, device: str) -> str:
        return device.split(":")[0]

    # ---- compile ----

    def compile(self, source: Source, arch: str | None, problem: Source | None, workdir: Path) -> CompileReport:
        started = time.perf_counter()
        arch = normalize_arch(arch)
        report = CompileReport(ok=False, target=self.name, arch=arch)
        try:
            _, builds = capture_builds(source, workdir)
        except (InputError, SourceRuntimeError) as e:
            report.diagnostics = e.diagnostics
            report.seconds = time.perf_counter() - started
            return report
        if not builds or not any(b.cuda for b in builds):
            report.diagnostics = [
                Diagnostic(
                    file=source.name,
                    message="no load_inline(..., cuda_sources=...) call ran "
                    "while importing the candidate: nothing to compile",
                )
            ]
            report.seconds = time.perf_counter() - started
            return report
        diags: list[Diagnostic] = []
        ok = True
        for i, build in enumerate(builds):
            b_ok, b_diags = self._compile_build(build, i, source, arch, workdir, report)
            ok, diags = ok and b_ok, diags + b_diags
        report.diagnostics = diags
        report.ok = ok and not any(d.severity == "error" for d in diags)
        report.signature_source = "source"
        report.seconds = time.perf_counter() - started
        return report

    def _compile_build(
        self, build: InlineBuild, index: int, source: Source, arch: str, workdir: Path, report: CompileReport
    ) -> tuple[bool, list[Diagnostic]]:
        diags = binding_diagnostics(build, source)
        if not build.cuda:
            return not diags, diags
        pieces = map_pieces(build.cuda, source.text, "cuda_sources")
        includes = _cutlass_includes(pieces, build, source, diags)
        flags = usable_flags(build.flags())
        blocks = [(p, top_level_blocks(p.text)) for p in pieces]

        lean_cu = workdir / f"lean_{index}.cu"
        (workdir / "kforge_torch_lean.h").write_text(TORCH_LEAN_H)
        lean_cu.write_text(
            '#include "kforge_torch_lean.h"\n' + "\n".join(lean_piece(p).annotated(source.name) for p in pieces) + "\n"
        )
        # the host unit as the split build compiles it, beside the lean compile: its verdict on host code is
        # the real build's (the lean header stands in loosely)
        with ThreadPoolExecutor(max_workers=1) as pool:
            host_check = pool.submit(check_host_unit, build, source, arch, workdir, self.settings.cuda_pch_on)
            run = run_nvcc(lean_cu, arch, [str(workdir), *includes], flags, workdir)
            host = host_check.result()
        mode = "lean"
        raw = parse_compiler_output(run.output)
        if host is not None:  # host-code errors of the stand-in give way to the real headers' verdict
            raw = [r for r in raw if not (r.severity == "error" and in_host_glue(r, source.name, pieces, blocks))]
            diags += [] if host[0] else build_errors(host[1], source.name)
        lean_failed = any(r.severity == "error" for r in raw)
        if lean_failed and not lean_errors_trusted(raw, source.name, pieces, blocks):
            full_cu = workdir / f"full_{index}.cu"
            full_cu.write_text(LOAD_INLINE_CUDA_PREFIX + "\n".join(p.annotated(source.name) for p in pieces) + "\n")
            run = run_nvcc(full_cu, arch, [*torch_include_dirs(), *includes], flags + cpu_torch_flags(), workdir)
            mode = "full"
            raw = parse_compiler_output(run.output)
        diags += to_diagnostics(raw, source, pieces, blocks, run)
        if not run.ok and lean_failed and not any(d.severity == "error" for d in diags):
            diags.append(
                Diagnostic(file=source.name, line=build.call_line, message="nvcc failed: " + run.output.strip()[-2000:])
            )
        if run.ok:
            self._resources(run, report, build)
        elif not lean_failed:
            diags.append(
                Diagnostic(
                    severity="note",
                    file=source.name,
                    line=build.call_line,
                    message="no kernel resources: kforge's lean stand-in for torch's headers does not cover this "
                    "host code (the host code itself was judged with torch's real headers)",
                )
            )
        host_ok = host is None or host[0]
        if host is not None:
            diags.append(
                Diagnostic(
                    severity="note",
                    file=source.name,
                    line=build.call_line,
                    message=f"load_inline '{build.name}': host code compiled as the split build compiles it "
                    f"(torch's real headers): {'ok' if host_ok else 'failed'}",
                )
            )
        diags.append(
            Diagnostic(
                severity="note",
                file=source.name,
                line=build.call_line,
                message=f"load_inline '{build.name}': nvcc -cubin -arch={arch} ({mode} path: "
                + (
                    "torch's headers replaced by kforge's lean stand-in; host code is checked "
                    "loosely, the real build runs in verify"
                    if mode == "lean"
                    else "torch's real headers"
                )
                + f") in {run.seconds:.1f} s",
            )
        )
        return (run.ok or not lean_failed) and host_ok, diags

    def _resources(self, run: NvccRun, report: CompileReport, build: InlineBuild) -> None:
        usage = parse_ptxas_resources(run.output)
        names = demangle(list(usage))
        for mangled, u in usage.items():
            pretty = names.get(mangled, mangled)
            report.kernels.append(
                KernelResources(
                    name=pretty,
                    registers=u.get("registers"),
                    spills=u.get("spill_stores"),
                    shared_bytes=u.get("shared", 0),
                    stack_bytes=u.get("stack"),
                    signature={"symbol": mangled, "extension": build.name, "spill_loads": str(u.get("spill_loads", 0))},
                )
            )
        if run.ptx is not None:
            report.ptx = (report.ptx or {}) | {build.name: run.ptx.read_text(errors="replace")}
        if run.cubin is not None and hasattr(report, "sass"):
            sass = cubin_sass(run.cubin)
            if sass:
                report.sass = (report.sass or {}) | {build.name: sass}

    # ---- load (GPU) ----

    def load(self, source: Source, device: str, workdir: Path) -> Loaded:
        import torch

        if not device.startswith("cuda") or not torch.cuda.is_available():
            raise InputError(f"target 'cuda' needs an NVIDIA GPU to run (device '{device}')")
        builds: list[BuildInfo] = []
        capability = torch.cuda.get_device_capability(torch.device(device))
        module = load_candidate(source, capability, workdir, builds, self.settings)
        return Loaded(module, build_findings(builds))

    def prebuild(self, source: Source, device: str, workdir: Path) -> list[BuildInfo]:
        """Build the candidate's extensions for ``device``'s arch without importing them (a CPU worker
        does this while the GPU verifies another candidate)."""
        import torch

        builds: list[BuildInfo] = []
        load_candidate(
            source,
            torch.cuda.get_device_capability(torch.device(device)),
            workdir,
            builds,
            self.settings,
            prebuild=True,
        )
        return builds


def build_findings(builds: list[BuildInfo]) -> list[Finding]:
    """How each load_inline build of a load was made (path, reused units, first build), for the report."""
    return [
        Finding(
            code="cuda_build",
            message=f"load_inline built by the {b.path} path in {b.seconds:.1f} s"
            + (f" (reused: {', '.join(b.reused)})" if b.reused else "")
            + (f"; stock because {b.fallback}" if b.fallback else "")
            + (
                f"; first built in {b.first_build.get('seconds', 0):.1f} s (compiled "
                f"{', '.join(b.first_build.get('compiled') or {}) or 'nothing'})"
                if b.first_build
                else ""
            ),
            evidence={k: v for k, v in vars(b).items() if v not in (None, [], {})},
        )
        for b in builds
    ]


def lean_piece(piece: Piece) -> Piece:
    """The same lines with torch/pybind includes commented out (the lean header stands in)."""
    text = TORCH_HEADER.sub(lambda m: "// kforge lean: " + m.group(0).strip(), piece.text)
    return Piece(text, piece.lines, piece.label)
