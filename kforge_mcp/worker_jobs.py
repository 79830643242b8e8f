"""The jobs a worker process does, by kind: the entry point of every worker
(``python -m kforge_mcp.worker_jobs``; the pool starts it). It sits above judge, profiling and advice,
which it calls, so the loop that runs them (runtime/worker.py) need not import upward.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path

from kforge_mcp.core.requests import (
    BaselinesRequest,
    CompileRequest,
    PrebuildRequest,
    ProbeRequest,
    ProfileRequest,
    RooflineRequest,
    VerifyRequest,
    WarmUpRequest,
)
from kforge_mcp.runtime import worker


def handle_probe(req: ProbeRequest, progress, workdir: Path, state: dict) -> dict:
    from kforge_mcp.core.schemas import TargetsReport
    from kforge_mcp.devices.driver_probe import discover_without_torch
    from kforge_mcp.runtime import sandbox
    from kforge_mcp.targets import TARGETS

    found = discover_without_torch()  # torch's answer without its import, where that is exact
    if found is None:
        import torch

        from kforge_mcp.devices.device import discover, get_device

        devices, names = discover()
        facts: dict[str, str] = {"torch": torch.__version__}
        arch = (
            get_device("cuda:0").platform.arch(*torch.cuda.get_device_capability(0))
            if torch.cuda.is_available()
            else None
        )
        if arch:
            facts["arch"] = arch
    else:
        devices, names, facts = found
    host = {"python": platform.python_version(), "torch": facts["torch"], "platform": platform.platform()}
    host.update({f"device {d}": n for d, n in names.items()})
    host["sandbox"] = sandbox.describe()
    host.update({k: v for k, v in facts.items() if k == "arch"})
    host["probe"] = "torch" if found is None else "driver"
    return TargetsReport(targets=[t.probe(devices) for t in TARGETS.values()], host=host).model_dump()


def handle_compile(req: CompileRequest, progress, workdir: Path, state: dict) -> dict:
    from kforge_mcp.platforms import compile_diagnostics
    from kforge_mcp.targets import get_target

    target = get_target(req.target)
    progress(f"compiling for {req.arch or 'the default arch'}")
    report = target.compile(req.source, req.arch, req.problem, workdir)
    if not report.toolchain:
        report.toolchain = {k: v for k, v in target.cache_versions().items() if v != "-" and k != "compile"}
    limits = compile_diagnostics(report)  # what the limits of the platform the arch builds for say of it
    for d in limits:
        d.file = req.source.name
    report.diagnostics = limits + report.diagnostics  # errors first: they are what to fix
    report.ok = report.ok and not any(d.severity == "error" for d in limits)
    if not req.emit_ptx:
        report.ptx = None
        report.sass = None
    return report.model_dump()


def handle_prebuild(req: PrebuildRequest, progress, workdir: Path, state: dict) -> dict:
    """Build a candidate's kernels for a device without running them (ahead of its GPU verify)."""
    from kforge_mcp.targets import get_target

    started = time.perf_counter()
    builds = get_target(req.target).prebuild(req.candidate, req.device, workdir)
    return {"builds": [vars(b) for b in builds], "seconds": round(time.perf_counter() - started, 2)}


def handle_verify(req: VerifyRequest, progress, workdir: Path, state: dict) -> dict:
    from kforge_mcp.judge.baselines import BaselineCache
    from kforge_mcp.judge.verify import run_verify

    cache = state.setdefault("baselines", BaselineCache())
    return run_verify(req, progress, workdir, cache, state["settings"].worker_memory_mb).model_dump()


def handle_baselines(req: BaselinesRequest, progress, workdir: Path, state: dict) -> dict:
    from kforge_mcp.judge.baselines import BaselineCache
    from kforge_mcp.judge.verify import run_baselines

    cache = state.setdefault("baselines", BaselineCache())
    return run_baselines(req, progress, workdir, cache, state["settings"].worker_memory_mb)


def handle_profile(req: ProfileRequest, progress, workdir: Path, state: dict) -> dict:
    from kforge_mcp.profiling.capture import run_profile

    if "baselines" in state:
        state["baselines"].settled()  # no torch.compile of an earlier verify runs while this one profiles
    report = run_profile(req, progress, workdir, state["settings"], profile_cache(state))
    return {**report.model_dump(), "raw": report.raw}  # raw is excluded from dumps: send it anyway


def profile_cache(state: dict):
    """What this worker keeps between profiles (capture.ProfileCache): the profiles' and the warm-up's one copy."""
    from kforge_mcp.profiling.capture import ProfileCache

    return state.setdefault("profiles", ProfileCache())


def handle_roofline(req: RooflineRequest, progress, workdir: Path, state: dict) -> dict:
    from kforge_mcp.core.problem import load_problem
    from kforge_mcp.judge.roofline import count_problem, reference_roofline
    from kforge_mcp.judge.structure import reference_levers

    problem = load_problem(req.problem, workdir)
    if req.measure_paths:  # each compute path's error on the problem's own inputs (CPU), and the levers
        from kforge_mcp.judge.precision_paths import PeakRSS, measure_reference
        from kforge_mcp.judge.roofline import from_measured

        progress("measuring the compute paths on the problem's inputs")
        with PeakRSS() as rss:
            started = time.perf_counter()
            counts = count_problem(problem, "cpu")
            counted_s = round(time.perf_counter() - started, 3)
            m = measure_reference(problem, req, counts)
            roof = reference_levers(problem, "cpu", from_measured(m, None))
        m.levers = roof.levers
        m.notes += [n for n in roof.notes if n not in m.notes and ("not checked" in n or "levers" in n)]
        m.peak_rss_bytes = rss.peak
        m.phases = {"count": counted_s, **m.phases}
        return m.model_dump()
    roof = reference_roofline(problem, "cpu", req.device_name, req.measured_ms, req.peaks, req.atol, req.rtol)
    return reference_levers(problem, "cpu", roof).model_dump()


# a problem with a product and a convolution, measured once to warm a CPU worker for the paths' measurement
PATHS_WARM_UP_PROBLEM = """import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3)
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


def get_inputs():
    return [torch.rand(2, 2, 6, 6)]


def get_init_inputs():
    return []
"""


def handle_warm_up(req: WarmUpRequest, progress, workdir: Path, state: dict) -> dict:
    """Before any problem is known: torch.compile's fixed cost paid on this device (baselines.warm_inductor), and on
    a CPU worker the paths' measurement run once on a tiny problem; after a verify (or at a server's start): the
    metrics profiler's program launched for the first profile (profiling/ahead.py)."""
    started = time.perf_counter()
    if req.stage == "profilers":
        from kforge_mcp.profiling.ahead import ready_profilers

        steps = ready_profilers(req.device, state["settings"], profile_cache(state))
        return {"seconds": round(time.perf_counter() - started, 2), "steps": steps}
    if req.stage == "paths":  # the flop counter's first use imports torch's compiler (seconds on a cold machine)
        from kforge_mcp.core.source import Source

        tiny = RooflineRequest(problem=Source(PATHS_WARM_UP_PROBLEM, "<warm-up>"), measure_paths=True)
        handle_roofline(tiny, lambda _: None, workdir, state)
        return {"seconds": round(time.perf_counter() - started, 2)}
    from kforge_mcp.judge.baselines import warm_inductor

    warm_inductor(req.device, req.stage)
    return {"seconds": round(time.perf_counter() - started, 2)}


HANDLERS: dict[str, worker.Handler] = {
    "probe": handle_probe,
    "compile": handle_compile,
    "verify": handle_verify,
    "prebuild": handle_prebuild,
    "baselines": handle_baselines,
    "profile": handle_profile,
    "roofline": handle_roofline,
    "warm_up": handle_warm_up,
}


if __name__ == "__main__":
    from kforge_mcp.judge.guards import timer_snapshot

    worker.main(HANDLERS, timer_snapshot)
