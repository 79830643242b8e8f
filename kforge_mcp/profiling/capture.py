"""One profile, inside a worker: run the candidate (or the reference) under torch.profiler for
a few warm forwards (or the device's own timeline where torch.profiler does not see its kernels),
compute the reference's roofline, attach Triton compile metadata, and at depth "metrics" re-run the
forwards under the device platform's metrics profiler (Nsight Compute on NVIDIA, xctrace on Apple)
in a subprocess and merge what it saw. Proton, on request, also runs in its own process: one CUPTI
user per process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kforge_mcp import platforms
from kforge_mcp.core.problem import build_models, load_problem, seed_everything
from kforge_mcp.core.process_env import child_environment
from kforge_mcp.core.profile import ProfileReport
from kforge_mcp.core.requests import ProfileRequest
from kforge_mcp.core.source import SourceRuntimeError
from kforge_mcp.devices.device import get_device
from kforge_mcp.judge.roofline import reference_roofline
from kforge_mcp.judge.structure import reference_levers
from kforge_mcp.judge.timing import sync_device
from kforge_mcp.platforms.base import Platform, ProfiledRun
from kforge_mcp.profiling.proton import report_from_hatchet
from kforge_mcp.profiling.torch_trace import FORWARD_MARK, report_from_trace
from kforge_mcp.profiling.weight_work import attach_weight_work
from kforge_mcp.targets import get_target

INPUT_SEED = 7
PROFILER_TIMEOUT_S = 300
RAW_MAX_BYTES = 16 * 1024 * 1024  # a raw profile kept as a resource: the worker's reply carries it once


def device_name(device: str) -> str:
    return get_device(device).display_name()


def run_profile(req: ProfileRequest, progress: Callable[[str], None], workdir: Path) -> ProfileReport:
    import torch
    from torch.profiler import profile, record_function

    started = time.perf_counter()
    target = get_target(req.target)
    device = req.device
    depth = req.depth
    iters = req.iterations
    warmup = warmup_forwards(req)
    problem = load_problem(req.problem, workdir)
    cand = req.candidate
    name = device_name(device)
    report = ProfileReport(
        source="torch.profiler",
        target=target.name if cand else "reference",
        device=device,
        device_name=name,
        execution=target.execution(device) if cand else "pytorch",
    )

    progress("building the model")
    module = None
    try:
        if cand is not None:
            module = target.load(cand, device, workdir).module
            _, model = build_models(problem, module, device, build_reference=False)
        else:
            seed_everything(0)
            model = problem.module.Model(*problem.init_inputs(device)).to(device)
    except SourceRuntimeError as e:
        report.errors.append(str(e))
        report.errors += [f"{d.file or ''}:{d.line or ''}: {d.message}" for d in e.diagnostics]
        report.seconds = time.perf_counter() - started
        return report
    inputs = problem.make_inputs(INPUT_SEED, device)

    platform = get_device(device).platform
    activities = get_device(device).profiler_activities()
    with torch.no_grad():
        progress(f"warming up ({warmup} forwards)")
        for _ in range(warmup):
            model(*inputs)  # JIT compiles happen here, outside the profile
        sync_device(device)
        progress(f"profiling {iters} forwards with torch.profiler")
        t0 = time.perf_counter()
        with profile(activities=activities) as prof:
            for _ in range(iters):
                with record_function(FORWARD_MARK):
                    model(*inputs)
            sync_device(device)
        wall_ms = (time.perf_counter() - t0) * 1e3 / iters
    trace = workdir / "trace.json"
    prof.export_chrome_trace(str(trace))
    text = trace.read_text()
    keep_raw(report, "trace.json", text)
    parsed = report_from_trace(text, "<torch.profiler trace>", forwards=iters)
    for key in (
        "kernels",
        "forwards",
        "forwards_inferred",
        "launches_per_forward",
        "device_ms_per_forward",
        "host_overhead_ms",
        "sm_count",
    ):
        setattr(report, key, getattr(parsed, key))
    report.notes += parsed.notes
    if report.sm_count is None:
        report.sm_count = get_device(device).sm_count()
    if report.execution == "triton-interpreter":
        report.notes.append(
            "Triton interpreter on CPU: there are no device kernels; times are CPU times of the "
            "interpreter and say nothing about a GPU"
        )
    if module is not None:
        target.profile_details(report, module, device)
        if target.launch_counter() is not None:
            progress("following the weights through two forwards")
            other = problem.make_inputs(INPUT_SEED + 1, device)
            attach_weight_work(report, model, inputs, other, target.launch_counter)
    with torch.no_grad():
        platform.device_timeline(report, lambda: model(*inputs), iters)

    measured = report.device_ms_per_forward if report.device_kernels() else wall_ms
    progress("computing the roofline")
    try:
        report.roofline = reference_levers(
            problem, device, reference_roofline(problem, device, name, measured, req.peaks)
        )
        if not report.device_kernels():
            report.roofline.notes.append("measured_ms is host wall time per forward (no device kernels)")
    except Exception as e:  # noqa: BLE001
        report.notes.append(f"roofline unavailable: {type(e).__name__}: {e}")

    if depth == "metrics":
        _merge_metrics(report, req, workdir, platform, progress)
    if req.proton:
        if platform.proton:
            progress("re-running under proton")
            _merge_proton(report, req, workdir)
        else:
            report.notes.append(f"proton does not see the kernels of {platform.title} ({device})")
    report.seconds = time.perf_counter() - started
    return report


def _merge_metrics(report: ProfileReport, req: ProfileRequest, workdir: Path, platform: Platform, progress) -> None:
    """Depth 'metrics': the forwards again under the platform's metrics profiler, merged into the timeline."""
    profiler = platform.metrics_profiler()
    if profiler is None:
        report.notes.append(
            f"depth 'metrics' needs a metrics profiler ({platforms.metrics_profilers()}); {req.device} "
            f"({platform.title}) has only the timeline"
        )
        return
    missing = profiler.missing()
    if missing:
        report.notes.append(f"depth 'metrics': {missing}; only the timeline was captured")
        return
    progress(f"re-running under {profiler.title}")
    run = ProfiledRun(
        workdir=workdir,
        iterations=req.iterations,
        warmup=warmup_forwards(req),
        metrics=req.metrics,
        timeout_s=req.ncu_timeout_s or PROFILER_TIMEOUT_S,
        runner=lambda mode, extra: _runner(req, workdir, mode, extra),
        run=lambda cmd, timeout: _run(cmd, workdir, timeout),
        keep_raw=lambda name, text: keep_raw(report, name, text),
    )
    captured = profiler.capture(run)
    report.notes += run.notes
    if captured is not None:
        profiler.merge(report, captured)


def warmup_forwards(req: ProfileRequest) -> int:
    """Forwards before the profiled ones: one on the CPU (the interpreter is slow), else two."""
    return req.warmup if req.warmup is not None else (1 if req.device == "cpu" else 2)


def _runner(req: ProfileRequest, workdir: Path, mode: str, extra: dict) -> list[str]:
    """The profiled program's command line: the runner in ``mode`` (a profiler's name) with its spec."""
    return [sys.executable, "-m", "kforge_mcp.profiling.runner", str(_runner_spec(req, workdir, mode, extra))]


def _runner_spec(req: ProfileRequest, workdir: Path, mode: str, extra: dict) -> Path:
    spec = {
        "problem": req.problem.to_wire(),
        "candidate": req.candidate.to_wire() if req.candidate else None,
        "target": req.target,
        "device": req.device,
        "warmup": warmup_forwards(req),
        "mode": mode,
        **extra,
    }
    path = workdir / f"{mode}-spec.json"
    path.write_text(json.dumps(spec))
    return path


def _run(cmd: list[str], workdir: Path, timeout: float) -> subprocess.CompletedProcess:
    env = child_environment(drop=("TRITON_INTERPRET",))
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)


def keep_raw(report: ProfileReport, name: str, text: str) -> None:
    """The profiler's own file, for the tool to keep as a resource; past RAW_MAX_BYTES only a note."""
    if len(text) > RAW_MAX_BYTES:
        report.notes.append(f"{name} ({len(text) / 1e6:.1f} MB) is too large to keep as a resource")
    else:
        report.raw[name] = text


def _merge_proton(report: ProfileReport, req: ProfileRequest, workdir: Path) -> None:
    name = str(workdir / "proton")
    try:
        proc = _run(
            _runner(req, workdir, "proton", {"proton_name": name, "iterations": req.iterations}),
            workdir,
            PROFILER_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        report.notes.append("proton run timed out")
        return
    hatchet = Path(name + ".hatchet")
    if proc.returncode != 0 or not hatchet.is_file():
        report.notes.append(f"proton failed (exit {proc.returncode}): {(proc.stderr or '')[-400:].strip()}")
        return
    pr = report_from_hatchet(hatchet.read_text(), "<proton>", forwards=req.iterations)
    by_name = {k.name: k for k in report.kernels}
    for k in pr.kernels:
        if k.name in by_name:
            by_name[k.name].metrics["proton_mean_ms"] = k.mean_ms
    report.source += "+proton"
