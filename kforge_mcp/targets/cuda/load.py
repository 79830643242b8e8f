"""Building and importing a CUDA candidate on a GPU machine (the cuda target's ``load``), and
building it ahead of time on a CPU worker (``prebuild``) so a batch's GPU never waits for nvcc.

Each ``load_inline`` call the candidate makes is built in a directory keyed by its sources,
flags, toolchain and arch, under a file lock: first by the split build (cuda_fast_build.py), and
by torch's stock build when the split cannot be faithful. A prebuild runs the same split build
for the same key, without importing the result; the GPU worker's later load finds it built.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import types
from pathlib import Path

from kforge_mcp.core.problem import Source
from kforge_mcp.core.process_env import torch_cuda_arch_list
from kforge_mcp.core.schemas import Diagnostic
from kforge_mcp.core.settings import Settings
from kforge_mcp.core.source import SourceRuntimeError, import_source
from kforge_mcp.targets.cuda.build import (
    CUTLASS_HEADER,
    InlineBuild,
    StubExtension,
    _as_list,
    cutlass_include_dir,
    extension_cache_dir,
    patched_load_inline,
)
from kforge_mcp.targets.cuda.build_plan import plan_build
from kforge_mcp.targets.cuda.fast_build import BuildInfo, FastBuildError, check_host, load_split, torch_versions
from kforge_mcp.targets.cuda.nvcc import build_errors
from kforge_mcp.targets.cuda.preludes import candidate_errors
from kforge_mcp.targets.cuda.split import CannotSplit
from kforge_mcp.targets.nvidia import tool_version
from kforge_mcp.targets.source_map import map_pieces

# The split build's units name every candidate file alike in their #line directives, as ccache's
# base_dir makes paths alike: the same code in two files (a batch's candidates) then shares its
# objects. The compiler's messages are given back the file's own name; a TORCH_CHECK raised at run
# time names this one, at the candidate's own line.
SHARED_NAME = "candidate.py"


def shared_names(texts, file: str):
    """The sources with ``file`` in their #line directives renamed SHARED_NAME."""
    directive = re.compile(r'^(#line \d+ )"' + re.escape(file) + '"$', re.M)
    if isinstance(texts, str):
        return directive.sub(lambda m: f'{m.group(1)}"{SHARED_NAME}"', texts)
    return [shared_names(t, file) for t in texts]


def own_name(output: str, file: str) -> str:
    """Compiler output with SHARED_NAME given back as the candidate's file."""
    return re.sub(r"(^|[\s(])" + re.escape(SHARED_NAME) + r"(?=[:(])", lambda m: m.group(1) + file, output, flags=re.M)


_LINE_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*line[ \t]+\d+.*$", re.M)


def split_build(
    real,
    name,
    cpp_src,
    cuda_src,
    functions,
    args,
    kwargs,
    build_dir,
    file: str,
    settings: Settings,
    import_module=True,
    link=True,
):
    """(module, info) from the split build; (None, info) sends the caller to the stock build. ``cpp_src`` and
    ``cuda_src`` carry SHARED_NAME in their #line directives (shared_names); ``file`` is the name given back in
    compiler output. A device-unit error located in the candidate's own code is the candidate's: raised at once."""
    info = BuildInfo(path="stock")
    if not settings.split_cuda_builds:
        info.fallback = "split builds are off"
        return None, info
    if args or not kwargs.get("is_python_module", True):
        info.fallback = "load_inline arguments the split build does not take"
        return None, info
    # the module's name: a kernel edit that moves cpp_sources down a line (its #line) keeps it, and its bindings
    declared = [_LINE_DIRECTIVE.sub("", text) for text in ([cpp_src] if isinstance(cpp_src, str) else cpp_src)]
    bind_key = hashlib.sha256(
        json.dumps([declared, functions, kwargs, torch_versions()], sort_keys=True, default=str).encode()
    ).hexdigest()[:16]
    try:
        return load_split(
            real,
            f"{name}_{bind_key}",
            cpp_src,
            cuda_src,
            functions,
            kwargs,
            build_dir,
            settings.cuda_pch_on,
            import_module,
            link,
            settings.nvcc_side_by_side,
        )
    except FastBuildError as e:
        e.output = own_name(e.output, file)
        if e.unit == "device" and candidate_errors(e.output, file):
            raise
        first = next((ln for ln in e.output.splitlines() if "error" in ln), e.output.strip()[:300])
        info.fallback = f"the split {e.unit} unit failed: {first}"
    except Exception as e:  # noqa: BLE001  (planning the build uses torch's internals: never the candidate's fault)
        info.fallback = f"split build could not start: {type(e).__name__}: {e}"
    return None, info


def check_host_unit(
    build: InlineBuild, source: Source, arch: str, workdir: Path, use_pch: bool
) -> tuple[bool, str] | None:
    """One load_inline call's host unit compiled as the split build compiles it, without a GPU: (ok, the
    compiler's output at the candidate's lines); None when the split build does not take the source."""
    import torch.utils.cpp_extension as ce

    cuda_src = shared_names(
        [p.annotated(source.name) for p in map_pieces(build.cuda, source.text, "cuda_sources")], source.name
    )
    cpp_src = shared_names(
        [p.annotated(source.name) for p in map_pieces(build.cpp, source.text, "cpp_sources")], source.name
    )
    kwargs = {k: v for k, v in build.kwargs.items() if k not in ("name", "cpp_sources", "cuda_sources", "functions")}
    kwargs.pop("build_directory", None)
    kwargs["verbose"] = False
    number = re.fullmatch(r"(?:sm|compute)_(\d+)(\d)([a-z]?)", arch)
    # torch plans for this arch; the host unit's flags do not depend on it
    with torch_cuda_arch_list(f"{number[1]}.{number[2]}{number[3]}" if number else "9.0"):
        try:
            try:
                plan = plan_build(
                    ce.load_inline, build.name, cpp_src, cuda_src, build.functions, kwargs, workdir / "plan"
                )
            except Exception:  # noqa: BLE001  (planning uses torch's internals: never the candidate's fault)
                return None
            ok, output = check_host(plan, extension_cache_dir(), use_pch)
        except CannotSplit:
            return None
    return ok, own_name(output, source.name)


def load_candidate(
    source: Source,
    capability: tuple[int, int],
    workdir: Path,
    builds: list[BuildInfo],
    settings: Settings,
    prebuild: bool = False,
    link: bool = True,
) -> types.ModuleType:
    """Import the candidate with its load_inline builds done here (``prebuild``: built, not imported;
    ``link=False`` as well: the split build's units compiled and nothing linked, which needs no GPU and
    no CUDA build of torch)."""
    import torch

    major, minor = capability
    arch = f"sm_{major}{minor}"
    errors: list[Diagnostic] = []

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
        # the file's name in the #line directives left out: the same text under another name (an agent's copy, a
        # new path) loads the extension built for it instead of linking it again, and shares the split's units
        shared_cpp, shared_cuda = shared_names(cpp_src, source.name), shared_names(cuda_src, source.name)
        key = hashlib.sha256(
            json.dumps(
                {
                    "name": name,
                    "cpp": shared_cpp,
                    "cuda": shared_cuda,
                    "functions": functions,
                    "flags": flags,
                    "cflags": kwargs.get("extra_cflags"),
                    "ldflags": kwargs.get("extra_ldflags"),
                    "includes": includes,
                    "torch": torch.__version__,
                    "torch_cuda": torch.version.cuda,
                    "nvcc": tool_version("nvcc"),
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

        with torch_cuda_arch_list(f"{major}.{minor}{'a' if major >= 9 else ''}"):
            started = time.perf_counter()
            try:
                # polled every 10 ms, not filelock's 50: a build found in the cache waits for the lock, not the poll
                with FileLock(str(build_dir) + ".lock").acquire(timeout=1800, poll_interval=0.01):
                    module, info = split_build(
                        real,
                        name,
                        shared_cpp,
                        shared_cuda,
                        functions,
                        args,
                        kwargs,
                        build_dir,
                        source.name,
                        settings,
                        not prebuild,
                        link,
                    )
                    builds.append(info)
                    if prebuild:  # the candidate's import goes on with stand-ins; the GPU worker imports the build
                        fns = functions if not isinstance(functions, str) else [functions]
                        return StubExtension(str(name), list(fns.keys()) if isinstance(fns, dict) else list(fns or []))
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
