"""CUDA C++ in KernelBench's form: Python that builds its kernels with
``torch.utils.cpp_extension.load_inline(name=..., cpp_sources=..., cuda_sources=..., functions=[...])``.

``compile`` never runs the candidate's build. The candidate is imported with ``load_inline``
swapped for a recorder, so module-level code runs and the CUDA strings it passes are
captured; each string is found again in the submitted file (``ast``) and written to a ``.cu``
with ``#line`` directives, so nvcc's messages point at lines of the Python file. nvcc then
compiles device code only (``-cubin``, ``-Xptxas -v``) for the chosen arch, without a GPU:

- the lean path (default) swaps torch's headers for a small stand-in (cuda_lean_header.py),
  a few seconds instead of ~80 s of parsing torch's headers on 2 cores;
- the full path uses torch's real headers; it runs when the lean path fails on something it
  cannot judge (host glue, a torch type), so a gap in the stand-in never becomes a false error.

``load`` (GPU only) runs the real ``load_inline``, with the same ``#line`` directives, in a
build directory keyed by source, flags, toolchain and arch, under a file lock.

Beside it: cuda_build.py (the captured builds), cuda_source.py (strings back to lines), nvcc.py
(running nvcc and reading what it says); cute.py reuses all three.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sysconfig
import threading
import time
import types
from pathlib import Path

from ..errors import InputError
from ..problem import Source
from ..settings import OFF, Settings
from ..schemas import CompileReport, Diagnostic, Finding, KernelResources, TargetStatus
from ..source import SourceRuntimeError, import_source
from .base import Target, dist_version, find_tool
from .cuda_build import InlineBuild, _as_list, capture_builds, extension_cache_dir, patched_load_inline
from .cuda_lean_header import TORCH_LEAN_H
from .cuda_source import Piece, map_pieces, top_level_blocks
from .cuda_fast_build import BuildInfo, FastBuildError, candidate_errors, load_split, prewarm_pch, torch_versions
from .nvcc import (
    NvccRun,
    build_errors,
    binding_diagnostics,
    cubin_sass,
    demangle,
    lean_errors_trusted,
    nvcc_version,
    parse_compiler_output,
    parse_ptxas_resources,
    run_nvcc,
    to_diagnostics,
    usable_flags,
)

DEFAULT_ARCH = "sm_90a"
NEEDS_GPU = "needs an NVIDIA GPU to run; compile works here"
TORCH_HEADER = re.compile(
    r'^[ \t]*#[ \t]*include[ \t]*[<"](torch/|ATen/|c10/|pybind11/|THC/|Python\.h)[^>"]*[>"]', re.M
)
CUTLASS_HEADER = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](cute|cutlass)/', re.M)
# load_inline puts these before the CUDA sources; the full path does the same
LOAD_INLINE_CUDA_PREFIX = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"


# ---- toolchain ----


def normalize_arch(arch: str | None) -> str:
    """'sm_90a', '90a', '9.0', 'sm_100a' -> 'sm_90a' style, as nvcc's -arch wants it."""
    text = (arch or DEFAULT_ARCH).strip().lower()
    m = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3})([af]?)", text) or re.fullmatch(r"(\d+)\.(\d)([af]?)", text)
    if not m:
        raise InputError(f"arch '{arch}' is not an NVIDIA arch such as sm_80, sm_90a or sm_100a")
    return f"sm_{m.group(1)}{m.group(2)}" if "." not in text else f"sm_{m.group(1)}{m.group(2)}{m.group(3)}"


def torch_include_dirs() -> list[str]:
    from torch.utils.cpp_extension import include_paths

    return [*include_paths(), sysconfig.get_paths()["include"]]


def cutlass_include_dir() -> str | None:
    """CuTe / CUTLASS C++ headers from the ``nvidia-cutlass`` wheel."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec and spec.origin:
        inc = Path(spec.origin).parent / "source" / "include"
        if (inc / "cute").is_dir():
            return str(inc)
    return None


# flags that only make sense for a real build, or that nvcc -cubin refuses


# ---- the target ----


class CudaTarget(Target):
    name = "cuda"
    summary = "CUDA C++ through torch.utils.cpp_extension.load_inline (KernelBench form)"
    title = "CUDA C++"
    order = 0

    def cache_versions(self) -> dict[str, str]:
        # CuTe C++ headers it may include; Triton's bundled ptxas and cuobjdump where no toolkit is
        return {d: dist_version(d) or "-" for d in ("nvidia-cutlass", "triton")}

    def probe(self, devices: list[str]) -> TargetStatus:
        import torch

        nvcc = find_tool("nvcc")
        versions = {
            k: v
            for k, v in {"nvcc": nvcc_version(), "torch": torch.__version__, "torch cuda": torch.version.cuda}.items()
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
        if torch.version.cuda is None:
            return TargetStatus(
                name=self.name,
                available=False,
                can_compile=True,
                versions=versions,
                notes=notes,
                reason="this torch build has no CUDA support; install a CUDA build of torch",
            )
        settings = Settings.read()
        if settings.cuda_build.strip().lower() == "split" and settings.cuda_pch.strip().lower() not in OFF:
            # torch's headers precompiled while the host starts up, before the first build needs them
            threading.Thread(target=prewarm_pch, args=(extension_cache_dir(),), daemon=True).start()
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
        flags = usable_flags(build.flags())
        blocks = [(p, top_level_blocks(p.text)) for p in pieces]

        lean_cu = workdir / f"lean_{index}.cu"
        (workdir / "kforge_torch_lean.h").write_text(TORCH_LEAN_H)
        lean_cu.write_text(
            '#include "kforge_torch_lean.h"\n' + "\n".join(lean_piece(p).annotated(source.name) for p in pieces) + "\n"
        )
        run = run_nvcc(lean_cu, arch, [str(workdir), *includes], flags, workdir)
        mode = "lean"
        raw = parse_compiler_output(run.output)
        if not run.ok and not lean_errors_trusted(raw, source.name, pieces, blocks):
            full_cu = workdir / f"full_{index}.cu"
            full_cu.write_text(LOAD_INLINE_CUDA_PREFIX + "\n".join(p.annotated(source.name) for p in pieces) + "\n")
            run = run_nvcc(full_cu, arch, [*torch_include_dirs(), *includes], flags, workdir)
            mode = "full"
            raw = parse_compiler_output(run.output)
        diags += to_diagnostics(raw, source, pieces, blocks, run)
        if not run.ok and not any(d.severity == "error" for d in diags):
            diags.append(
                Diagnostic(file=source.name, line=build.call_line, message="nvcc failed: " + run.output.strip()[-2000:])
            )
        if run.ok:
            self._resources(run, report, build)
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
        return run.ok, diags

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

    def _split_build(self, real, name, cpp_src, cuda_src, functions, args, kwargs, build_dir):
        """The split build (cuda_fast_build.py) when it applies; (None, info) sends the caller to the stock build.
        A device-unit error located in the candidate's kernels is the candidate's: it is raised at once."""
        settings = Settings.read()
        info = BuildInfo(path="stock")
        self.builds.append(info)
        if settings.cuda_build.strip().lower() != "split" or args or not kwargs.get("is_python_module", True):
            info.fallback = (
                "split builds are off"
                if settings.cuda_build.strip().lower() != "split"
                else "load_inline arguments the split build does not take"
            )
            return None, info
        bind_key = hashlib.sha256(
            json.dumps([cpp_src, functions, kwargs, torch_versions()], sort_keys=True, default=str).encode()
        ).hexdigest()[:16]
        try:
            module, built = load_split(
                real,
                f"{name}_{bind_key}",
                cpp_src,
                cuda_src,
                functions,
                kwargs,
                build_dir,
                settings.cuda_pch not in OFF,
            )
        except FastBuildError as e:
            if e.unit == "device" and candidate_errors(e.output, self.source_name):
                raise
            info.fallback = f"the split {e.unit} unit failed: " + next(
                (ln for ln in e.output.splitlines() if "error" in ln), e.output.strip()[:300]
            )
            return None, info
        except Exception as e:  # planning the build (torch's internals) is not the candidate's business
            info.fallback = f"split build could not start: {type(e).__name__}: {e}"
            return None, info
        self.builds[-1] = built
        return module, built

    def load_findings(self) -> list[Finding]:
        found = [
            Finding(
                code="cuda_build",
                message=f"load_inline built by the {b.path} path in {b.seconds:.1f} s"
                + (f" (reused: {', '.join(b.reused)})" if b.reused else "")
                + (f"; stock because {b.fallback}" if b.fallback else ""),
                evidence={k: v for k, v in vars(b).items() if v not in (None, [], {})},
            )
            for b in self.builds
        ]
        self.builds = []
        return found

    def load(self, source: Source, device: str, workdir: Path) -> types.ModuleType:
        import torch

        if not device.startswith("cuda") or not torch.cuda.is_available():
            raise InputError(f"target 'cuda' needs an NVIDIA GPU to run (device '{device}')")
        major, minor = torch.cuda.get_device_capability(torch.device(device))
        arch = f"sm_{major}{minor}"
        errors: list[Diagnostic] = []
        self.builds: list[BuildInfo] = []
        self.source_name = source.name

        def building(real, name, cpp_sources=None, cuda_sources=None, functions=None, *args, **kwargs):
            cuda = map_pieces(_as_list(cuda_sources), source.text, "cuda_sources")
            cpp = map_pieces(_as_list(cpp_sources), source.text, "cpp_sources")
            cuda_src = [p.annotated(source.name) for p in cuda]
            cpp_src = [p.annotated(source.name) for p in cpp]
            flags = kwargs.get("extra_cuda_cflags") or []
            includes = list(kwargs.get("extra_include_paths") or [])
            if any(CUTLASS_HEADER.search(p.text) for p in cuda) and cutlass_include_dir():
                includes.append(cutlass_include_dir())
                kwargs["extra_include_paths"] = includes
            key = hashlib.sha256(
                json.dumps(
                    {
                        "name": name,
                        "cpp": cpp_src,
                        "cuda": cuda_src,
                        "functions": functions,
                        "flags": flags,
                        "cflags": kwargs.get("extra_cflags"),
                        "ldflags": kwargs.get("extra_ldflags"),
                        "includes": includes,
                        "torch": torch.__version__,
                        "torch_cuda": torch.version.cuda,
                        "nvcc": nvcc_version(),
                        "arch": arch,
                    },
                    sort_keys=True,
                    default=str,
                ).encode()
            ).hexdigest()[:20]
            build_dir = extension_cache_dir() / f"{name}-{key}"
            build_dir.mkdir(parents=True, exist_ok=True)
            kwargs.pop("build_directory", None)
            kwargs.setdefault("verbose", False)
            from filelock import FileLock

            env_arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
            os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}{'a' if major >= 9 else ''}"
            started = time.perf_counter()
            try:
                with FileLock(str(build_dir) + ".lock", timeout=1800):
                    module, info = self._split_build(real, name, cpp_src, cuda_src, functions, args, kwargs, build_dir)
                    if module is not None:
                        return module
                    # keywords only: load_inline's positional order differs across torch versions (sycl_sources)
                    module = real(
                        f"{name}_{key}",
                        cpp_src,
                        *args,
                        cuda_sources=cuda_src,
                        functions=functions,
                        build_directory=str(build_dir),
                        **kwargs,
                    )
                    info.seconds = round(time.perf_counter() - started, 2)
                    return module
            except Exception as e:
                errors.extend(build_errors(str(getattr(e, "output", "")) or str(e), source.name))
                raise
            finally:
                if env_arch is None:
                    os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
                else:
                    os.environ["TORCH_CUDA_ARCH_LIST"] = env_arch

        holder: dict = {}

        def replacement(*args, **kwargs):
            return building(holder["real"], *args, **kwargs)

        try:
            with patched_load_inline(replacement) as real:
                holder["real"] = real
                return import_source(source, workdir, "candidate")
        except SourceRuntimeError as e:
            if not errors:
                raise
            # the build log is in the exception text; the parsed errors say it shorter
            call = [
                Diagnostic(line=d.line, severity="note", file=source.name, message="the load_inline build failed here")
                for d in e.diagnostics[:1]
            ]
            summary = "; ".join(f"line {d.line}: {d.message}" if d.line else d.message for d in errors[:3])
            raise SourceRuntimeError(f"{source.name}: load_inline build failed: {summary}", errors + call) from None


def lean_piece(piece: Piece) -> Piece:
    """The same lines with torch/pybind includes commented out (the lean header stands in)."""
    text = TORCH_HEADER.sub(lambda m: "// kforge lean: " + m.group(0).strip(), piece.text)
    return Piece(text, piece.lines, piece.label)
