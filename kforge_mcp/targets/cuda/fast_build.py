"""A load_inline build in seconds: torch plans it, kforge builds it from reusable parts.

torch writes the build it would run (build.ninja, main.cpp, cuda.cu: its flags for this torch,
toolkit and arch); nothing is compiled by torch. kforge then compiles three objects side by side
and links them with torch's flags, in two parts (split_link.py: the kernels apart from the rest):

- ``main.o``, the Python bindings: depends only on ``cpp_sources`` and ``functions`` (the module
  name is a hash of those), so kernel and host edits reuse it;
- ``host.o``, the host functions (split.py) by the C++ compiler with torch's headers,
  through a precompiled lean header where one is ready;
- ``device.o``, the kernels by nvcc without torch's headers (seconds), its host and device steps
  side by side, and after a kernel edit its host object kept with the new kernels in it (nvcc_steps.py).

Objects are cached by content, flags and toolchain versions under the extension cache
(build_cache.py); one that fails its checksum is rebuilt. When the source
cannot be split, or a unit fails in a way the stock build might not, the caller runs the stock
build, so the verdict never depends on this path.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from kforge_mcp.core.process_env import child_environment
from kforge_mcp.targets.cuda.build_cache import (
    ObjectCache,
    Pch,
    digest,
    preprocessed_text,
    seal,
    sealed,
    start_detached,
    start_logged,
    write_whole,
)
from kforge_mcp.targets.cuda.build_plan import Plan, plan_build, toolchain_id
from kforge_mcp.targets.cuda.nvcc_steps import side_by_side, visible_kernel_flags
from kforge_mcp.targets.cuda.preludes import (
    _EXTENSION_INCLUDE,
    FULL_BINDINGS_HEADER,
    LEAN_HOST_HEADER,
    LEAN_PRELUDE,
    PCH_PRELUDES,
    PRELUDE,
    PREWARMED,
    bindings_unit,
    device_prelude,
)
from kforge_mcp.targets.cuda.split import CannotSplit, split
from kforge_mcp.targets.cuda.split_link import HostLibrary, LinkError, link_kernels
from kforge_mcp.targets.cuda.symbols import defined_symbols, undefined_symbols


class FastBuildError(Exception):
    """A unit failed to compile; ``output`` is the compiler's text."""

    def __init__(self, unit: str, output: str):
        super().__init__(f"{unit} failed")
        self.unit, self.output = unit, output


@dataclass
class BuildInfo:
    """How one extension was built: what compiled, what was reused, and how long it took."""

    path: str = "split"
    seconds: float = 0.0
    compiled: dict[str, float] = field(default_factory=dict)
    reused: list[str] = field(default_factory=list)
    pch: dict[str, str] = field(default_factory=dict)  # unit -> its precompiled header: used or building
    headers: dict[str, str] = field(default_factory=dict)  # unit -> the torch header it was compiled with
    nvcc_steps: str | None = None  # the device unit compiled: its nvcc steps side-by-side or in-turn
    # template kernels compiled from the host unit's launches beside it: "used", or "missed" (compiled again
    # with the host object's list); None where they were not tried
    likely_instantiations: str | None = None
    linked: dict[str, float] = field(default_factory=dict)  # seconds: the host library (once), the kernels
    fallback: str | None = None
    first_build: dict | None = None  # a reused extension: how it was built (often ahead, by a CPU worker)


def pchs_for(plan: Plan, cache_root: Path, versions: tuple, names=tuple(PCH_PRELUDES)) -> dict[str, Pch]:
    """The precompiled lean preludes, by name."""
    return {name: Pch(cache_root, plan.cxx, plan.host_cflags, versions, name, PCH_PRELUDES[name]) for name in names}


def build(
    plan: Plan,
    module_name: str,
    out_dir: Path,
    cache_root: Path,
    use_pch: bool = True,
    link: bool = True,
    nvcc_side_by_side: bool = True,
) -> BuildInfo:
    """Compile what the caches lack, side by side, and link ``out_dir/<module_name>.so`` (``link=False``:
    the objects only, as a machine without a CUDA build of torch can make them; ``nvcc_side_by_side``:
    the device unit's nvcc steps run as nvcc_steps.py runs them)."""
    started = time.perf_counter()
    info = BuildInfo()
    try:
        units = split(plan.cuda_cu)
    except CannotSplit as e:
        info.path, info.fallback = "stock", str(e)
        return info
    versions = toolchain_id(plan)
    objects = ObjectCache(cache_root / "objects")
    main_prelude, lean_main_cpp, main_header = bindings_unit(plan.main_cpp)
    preludes = {"main": main_prelude, "host": "host"}
    pchs = pchs_for(plan, cache_root, versions, [n for n in preludes.values() if n]) if use_pch else {}
    info.pch = {unit: "used" if pchs[n].ready else "building" for unit, n in preludes.items() if n in pchs}
    work = Path(tempfile.mkdtemp(prefix="build-", dir=out_dir))

    def included(name: str, text: str) -> list[str]:
        """Flags that include ``text`` first, from a header written for this build."""
        (work / f"kforge_{name}.h").write_text(text)
        return ["-include", str(work / f"kforge_{name}.h")]

    def lean_prelude(unit: str) -> tuple[str, list[str]]:
        """The unit's lean prelude and the flags that include it: precompiled when ready."""
        name = preludes[unit]
        assert name is not None  # a unit builds lean only when it has a prelude (`lean` below)
        return PCH_PRELUDES[name], pchs[name].flags() if name in pchs else included(name, PCH_PRELUDES[name])

    made_of: dict[str, str] = {}  # unit -> the key of what it is made of, beside its source's

    def job(unit: str, source: str, cmd: list[str], lean: bool, *parts) -> tuple[str, list[str]]:
        """The unit's key (its source and ``parts``) and command. Through its precompiled header, what the unit
        is made of keys it too: a kernel edit that moves the host code and the bindings down a line leaves
        that as it was (build_cache.preprocessed_text)."""
        name = preludes[unit]
        text = preprocessed_text(cmd, work) if lean and name in pchs and pchs[name].ready else None
        if text is None:
            made_of.pop(unit, None)
        else:
            made_of[unit] = digest(f"{unit} made of", text, *parts)
        return digest(unit, source, *parts), cmd

    def main_job(lean: bool) -> tuple[str, list[str]]:
        source = lean_main_cpp if lean else plan.main_cpp
        info.headers["main"] = main_header if lean else FULL_BINDINGS_HEADER
        prelude, include = lean_prelude("main") if lean else ("", [])
        (work / "main.cpp").write_text(source)
        cmd = [*plan.cxx, *plan.cflags, *include, "-c", "main.cpp", "-o", "main.o", *plan.post_cflags]
        return job("main", source, cmd, lean, plan.cxx, plan.cflags, plan.post_cflags, versions, prelude)

    def host_job(lean: bool) -> tuple[str, list[str]]:
        source = _EXTENSION_INCLUDE.sub(LEAN_HOST_HEADER, units.host) if lean else units.host
        info.headers["host"] = LEAN_HOST_HEADER if lean else FULL_BINDINGS_HEADER
        prelude, include = lean_prelude("host") if lean else (PRELUDE, included("cuda_host", PRELUDE))
        (work / "host.cpp").write_text(source)
        cmd = [*plan.cxx, *plan.host_cflags, *include, "-x", "c++", "-c", "host.cpp", "-o", "host.o", *plan.post_cflags]
        return job("host", source, cmd, lean, plan.cxx, plan.host_cflags, plan.post_cflags, versions, prelude)

    def device_job(instantiations: list[str]) -> tuple[str, list[str]]:
        source = units.device
        if instantiations:  # after the candidate's lines, under a name of their own
            source += '\n#line 1 "kforge-instantiations"\n' + "\n".join(instantiations) + "\n"
        prelude = device_prelude(source)
        include = included("device", prelude) if prelude else []
        weak_stubs = ["-static-global-template-stub=false"] if units.templates else []
        visible = list(visible_kernel_flags(tuple(plan.nvcc)))
        (work / "device.cu").write_text(source)
        return (
            digest("device", source, plan.nvcc, plan.cuda_cflags, plan.cuda_post_cflags, versions, prelude, visible),
            [*plan.nvcc, *plan.cuda_cflags, *include, *weak_stubs, *visible, "-c", "device.cu", "-o", "device.o"]
            + plan.cuda_post_cflags,
        )

    lean = {"main": main_prelude is not None, "host": True}
    full_jobs = {"main": main_job, "host": host_job}
    jobs = {"main": main_job(lean["main"]), "host": host_job(lean["host"])}
    # template kernels: the host object says which instantiations the device unit needs; where the host unit's
    # launches say it first, the device unit compiles beside the host unit (a third compile at once: only where
    # a core is free for it). With the host object cached too, so that a kernel edit's device unit is the text
    # the first build's was, and its host object is the one kept then (nvcc_steps.py).
    spare_core = (os.cpu_count() or 1) >= 4
    likely = units.likely_instantiations() if spare_core else None
    if not units.templates or likely:
        jobs["device"] = device_job(likely or [])
    found: dict[str, Path] = {}
    running: dict[str, tuple[subprocess.Popen, float, FileLock]] = {}
    host_library: HostLibrary | None = None

    def start_host_library() -> None:
        """Link main.o and host.o from the moment both exist, while the device unit may still compile."""
        nonlocal host_library
        if link and host_library is None and "main" in found and "host" in found:
            host_library = HostLibrary(plan, objects, found["main"], found["host"], work)

    def take(unit: str, wait: float) -> bool:
        """Reuse the unit's object or start compiling it; False: another build holds it now."""
        key, cmd = jobs[unit]
        lock = FileLock(str(objects.root / f"{key}.lock"))
        try:
            lock.acquire(timeout=wait)
        except Timeout:
            return False
        hit = objects.get(key)
        if unit in made_of:
            kept = objects.get(made_of[unit])
            if hit is None:
                hit = kept
            elif kept is None:  # an object from before its header was precompiled: kept by what it is made of too
                objects.put(made_of[unit], hit)
        if hit is not None:
            lock.release()
            found[unit] = hit
            info.reused.append(unit)
        else:
            t0 = time.perf_counter()
            steps = None
            if unit == "device" and nvcc_side_by_side:
                steps = side_by_side(cmd, work / "device.cu", objects.root, digest(plan.nvcc, versions))
            if unit == "device":
                info.nvcc_steps = "side-by-side" if steps else "in-turn"
            running[unit] = (start_logged(steps or cmd, work, work / f"{unit}.log"), t0, lock)
        return True

    failures: list[FastBuildError] = []

    def finish() -> None:
        """Wait for the compiles started (each timed to its own end), keep their objects, release their locks."""
        while running:
            for unit, (proc, t0, lock) in list(running.items()):
                if proc.poll() is None:
                    continue
                try:
                    info.compiled[unit] = round(time.perf_counter() - t0, 2)
                    if proc.returncode != 0:
                        failures.append(FastBuildError(unit, (work / f"{unit}.log").read_text(errors="replace")))
                    else:
                        found[unit] = objects.put(jobs[unit][0], work / f"{unit}.o")
                        if unit in made_of:
                            objects.put(made_of[unit], found[unit])
                        if (work / f"{unit}.o.host-kept").exists():  # nvcc_steps.py: its last step was not run
                            info.reused.append("device host object")
                finally:
                    lock.release()
                    del running[unit]
                start_host_library()
            if running:
                time.sleep(0.02)

    def run(units_now: list[str]) -> None:
        # a batch's builds share objects (the bindings): one compiles each; the others first finish
        # what only they need, holding no lock, then wait for it
        waiting = [u for u in units_now if not take(u, 0)]
        finish()
        for unit in waiting:
            if not take(unit, 900):
                raise FastBuildError(unit, "another build held this object for 900 s")
        finish()

    run(list(jobs))
    again = [u for u in full_jobs if lean[u] and any(f.unit == u for f in failures)]  # needed more than the lean header
    if again:
        failures[:] = [f for f in failures if f.unit not in again]
        for unit in again:
            jobs[unit] = full_jobs[unit](False)
            info.headers[unit] += " (the lean header was not enough)"
            take(unit, 900)
        finish()
    start_host_library()
    if units.templates and "host" in found:
        symbols = undefined_symbols(found["host"])
        calls = units.template_calls(symbols)
        if "device" in found and set(calls) <= defined_symbols(found["device"]):
            info.likely_instantiations = "used"
        else:  # the launches did not say them all (or said one that does not compile): the host object's
            info.likely_instantiations = "missed" if likely else None
            failures[:] = [f for f in failures if f.unit != "device"]
            found.pop("device", None)
            jobs["device"] = device_job(units.instantiations(symbols))
            run(["device"])
    elif likely:  # the host unit failed: its error is the build's, as when the device unit waits for it
        failures[:] = [f for f in failures if f.unit != "device"]
    failed = failures[0] if failures else None
    for p in pchs.values():
        if not p.ready:
            p.start_build()  # the next build of that unit parses torch's headers from it
    if failed is not None:
        if host_library is not None:  # let it finish into the cache: the next build needs it
            with contextlib.suppress(LinkError):
                host_library.wait()
        raise failed
    if not link:
        shutil.rmtree(work, ignore_errors=True)
        info.seconds = round(time.perf_counter() - started, 2)
        return info
    try:
        assert host_library is not None  # started once main.o and host.o existed (above)
        library = host_library.wait()
        if host_library.seconds is None:
            info.reused.append("host library")
        else:
            info.linked["host library"] = host_library.seconds
        private = out_dir / f"lib{module_name}_host.so"
        info.linked["kernels"] = link_kernels(plan, found["device"], library, private, work)
    except LinkError as e:
        raise FastBuildError("link", e.output) from None
    os.replace(work / "ext.so", out_dir / f"{module_name}.so")
    shutil.rmtree(work, ignore_errors=True)
    info.seconds = round(time.perf_counter() - started, 2)
    return info


def check_host(plan: Plan, cache_root: Path, use_pch: bool = True) -> tuple[bool, str]:
    """The split host unit compiled as build() compiles it (the lean header, then the full one), syntax
    only: (ok, the compiler's output). The check `compile` runs, so it rejects what the build rejects.
    Raises CannotSplit for a source the split build does not take."""
    units = split(plan.cuda_cu)
    versions = toolchain_id(plan)
    # a host unit that passed once passes again (a kernel edit leaves it as it was): remembered by content
    passed = cache_root / "host-checks" / digest(units.host, plan.cxx, plan.host_cflags, plan.post_cflags, versions)
    if passed.exists():
        return True, ""
    pch = pchs_for(plan, cache_root, versions, ["host"])["host"] if use_pch else None
    work = Path(tempfile.mkdtemp(prefix="host-check-"))
    output = ""
    try:
        for lean in (True, False):
            source = _EXTENSION_INCLUDE.sub(LEAN_HOST_HEADER, units.host) if lean else units.host
            if lean and pch is not None and pch.ready:
                include = pch.flags()
            else:
                (work / "prelude.h").write_text(LEAN_PRELUDE if lean else PRELUDE)
                include = ["-include", str(work / "prelude.h")]
            (work / "host.cpp").write_text(source)
            cmd = [*plan.cxx, *plan.host_cflags, *include, "-fsyntax-only", "-x", "c++", "host.cpp", *plan.post_cflags]
            run = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=900)
            if run.returncode == 0:
                passed.parent.mkdir(parents=True, exist_ok=True)
                passed.touch()
                return True, ""
            output = run.stdout + run.stderr
        return False, output
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if pch is not None and not pch.ready:
            pch.start_build()


def import_extension(path: Path) -> types.ModuleType:
    """The extension at ``path`` imported under a name of its own, ``<its folder>.<module name>``. Every
    version of a candidate's kernels has the same module name (the bindings, and so their PyInit, are
    reused across kernel edits), and pybind11 3 hands back the module first created under a spec's name:
    imported by that name alone, an edited kernel loaded in a warm worker would run the one loaded before.
    Python finds PyInit by the name's last part, so the bindings need not change."""
    package = re.sub(r"\W", "_", path.parent.name)
    spec = importlib.util.spec_from_file_location(f"kforge_{package}.{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the extension {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if getattr(module, "__file__", None) != str(path):  # a module cached under this name: never run it for this one
        raise ImportError(f"importing {path} gave back the module of {getattr(module, '__file__', None)}")
    return module


def load_split(
    real_load_inline,
    module_name: str,
    cpp_src,
    cuda_src,
    functions,
    kwargs: dict,
    build_dir: Path,
    pch: bool,
    import_module: bool = True,
    link: bool = True,
    nvcc_side_by_side: bool = True,
):
    """The extension from the split build: (module, info), or (None, info) when the stock build must run
    (``link=False``: the units compiled, nothing linked or loaded). Raises FastBuildError when a unit
    fails (the caller decides whether that is the candidate's error)."""

    def load():
        return import_extension(build_dir / f"{module_name}.so") if import_module else None

    so = build_dir / f"{module_name}.so"
    if sealed(so):
        try:
            first = json.loads(so.with_name(so.name + ".build.json").read_text())
        except (OSError, ValueError):
            first = None
        return load(), BuildInfo(reused=["extension"], first_build=first)
    started = time.perf_counter()
    plan = plan_build(real_load_inline, module_name, cpp_src, cuda_src, functions, kwargs, build_dir / "plan")
    info = build(
        plan, module_name, build_dir, build_dir.parent, use_pch=pch, link=link, nvcc_side_by_side=nvcc_side_by_side
    )
    if info.path != "split" or not link:
        return None, info
    info.seconds = round(time.perf_counter() - started, 2)
    write_whole(so.with_name(so.name + ".build.json"), json.dumps(vars(info)).encode())
    seal(so)
    return load(), info


def torch_versions() -> list:
    import torch

    return [torch.__version__, torch.version.cuda]


def prewarm_pch(cache_root: Path) -> None:
    """Start precompiling the units' lean headers (a GPU machine's first builds then use them)."""
    import torch.utils.cpp_extension as ce

    where = Path(tempfile.mkdtemp(prefix="kforge-pch-plan-"))
    try:
        plan = plan_build(ce.load_inline, "kforge_pch_plan", "", "__global__ void k() {}", [], {}, where)
        for pch in pchs_for(plan, cache_root, toolchain_id(plan), PREWARMED).values():
            pch.start_build()
    except Exception:  # noqa: BLE001  (a head start only: the first build precompiles them otherwise)
        pass
    finally:
        shutil.rmtree(where, ignore_errors=True)


def start_pch_prewarm(cache_root: Path) -> None:
    """prewarm_pch in a process of its own. Planning swaps functions of torch.utils.cpp_extension for
    a moment; a thread of a worker did that under a job's feet (and, while a candidate's import had
    load_inline swapped, built a whole dummy extension inside that job)."""
    package_root = str(Path(__file__).resolve().parents[3])
    env = child_environment(pythonpath_first=package_root)
    code = "import sys, pathlib; from kforge_mcp.targets.cuda.fast_build import prewarm_pch; "
    code += "prewarm_pch(pathlib.Path(sys.argv[1]))"
    start_detached([sys.executable, "-c", code, str(cache_root)], env)
