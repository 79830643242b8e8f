"""One profile, inside a worker: run the candidate (or the reference) under torch.profiler for
a few warm forwards, compute the reference's roofline, attach Triton compile metadata, and
(depth "metrics", ncu on PATH, a CUDA device) re-run one forward under Nsight Compute in a
subprocess and merge its metrics. Proton, on request, also runs in its own process: one CUPTI
user per process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kforge_mcp.core.problem import build_models, load_problem, seed_everything
from kforge_mcp.core.requests import ProfileRequest
from kforge_mcp.core.source import SourceRuntimeError
from kforge_mcp.devices.device import get_device
from kforge_mcp.judge.roofline import reference_roofline
from kforge_mcp.judge.structure import reference_levers
from kforge_mcp.judge.timing import sync_device
from kforge_mcp.profiling import ncu as ncu_parse
from kforge_mcp.profiling.ncu_metrics import CORE_METRICS, DEFAULT_METRICS, SECTIONS, ncu_args
from kforge_mcp.profiling.proton import report_from_hatchet
from kforge_mcp.profiling.report import KernelProfile, ProfileReport
from kforge_mcp.profiling.torch_trace import FORWARD_MARK, report_from_trace
from kforge_mcp.profiling.weight_work import attach_weight_work
from kforge_mcp.targets import get_target

INPUT_SEED = 7
NCU_TIMEOUT_S = 300
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
    profilers = get_device(device).profilers
    if "mps events" in profilers:
        with torch.no_grad():
            _mps_timeline(report, model, inputs, iters)

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

    if depth == "metrics" and "xctrace" in profilers:
        if shutil.which("xcrun") is None:
            report.notes.append("depth 'metrics' on mps needs Xcode's xctrace (xcrun); only the timeline was captured")
        else:
            progress("re-running under Instruments' Metal System Trace (xctrace)")
            _merge_xctrace(report, req, workdir)
    elif depth == "metrics":
        if "ncu" not in profilers:
            report.notes.append(
                f"depth 'metrics' needs Nsight Compute on a CUDA device; {device} has only the timeline"
            )
        elif shutil.which("ncu") is None:
            report.notes.append(
                "depth 'metrics': ncu is not on PATH here; only the torch.profiler timeline was captured"
            )
        else:
            progress("re-running one forward under Nsight Compute")
            _merge_ncu(report, req, workdir)
    if req.proton:
        if "proton" in profilers:
            progress("re-running under proton")
            _merge_proton(report, req, workdir)
        else:
            report.notes.append("proton needs a GPU device")
    report.seconds = time.perf_counter() - started
    return report


def _mps_timeline(report: ProfileReport, model, inputs, iters: int) -> None:
    """torch.profiler sees no Metal GPU work: time each forward with MPS events instead, inside
    torch.mps.profiler's signposts (so an Instruments recording shows each forward)."""
    import torch

    starts = [torch.mps.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.mps.Event(enable_timing=True) for _ in range(iters)]
    with torch.mps.profiler.profile(mode="interval", wait_until_completed=False):
        for s, e in zip(starts, ends):
            s.record()
            model(*inputs)
            e.record()
    torch.mps.synchronize()
    report.device_ms_per_forward = sum(s.elapsed_time(e) for s, e in zip(starts, ends)) / iters
    report.notes.append(
        "mps: device time per forward from MPS events (torch.profiler does not see Metal kernels); "
        "per-kernel times need depth 'metrics' (xctrace)"
    )


XCTRACE_XPATH = '/trace-toc/run[@number="1"]/data/table[@schema="metal-gpu-intervals"]'


def _merge_xctrace(report: ProfileReport, req: ProfileRequest, workdir: Path) -> None:
    """Record the forwards under Instruments' Metal System Trace, export the GPU intervals and
    take per-kernel device times and the busy/idle timeline from them."""
    from kforge_mcp.profiling.xctrace import report_from_xml

    iters = req.iterations
    spec = _runner_spec(req, workdir, "xctrace", {"iterations": iters})
    trace = workdir / "metal.trace"
    record = [
        "xcrun",
        "xctrace",
        "record",
        "--template",
        "Metal System Trace",
        "--output",
        str(trace),
        "--no-prompt",
        "--launch",
        "--",
        sys.executable,
        "-m",
        "kforge_mcp.profiling.runner",
        str(spec),
    ]
    try:
        proc = _run(record, workdir, NCU_TIMEOUT_S)
        if proc.returncode != 0 or not trace.exists():
            report.notes.append(f"xctrace record failed (exit {proc.returncode}): {(proc.stderr or '')[-400:].strip()}")
            return
        proc = _run(
            ["xcrun", "xctrace", "export", "--input", str(trace), "--xpath", XCTRACE_XPATH], workdir, NCU_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        report.notes.append("xctrace did not finish in time; metrics skipped")
        return
    try:
        # the recording holds the runner's warm-up forwards too
        xr = report_from_xml(proc.stdout, "<xctrace export>", forwards=iters + warmup_forwards(req))
    except ncu_parse.ProfileParseError as e:
        report.notes.append(f"xctrace export gave no GPU intervals: {e}")
        return
    report.kernels = [k for k in report.kernels if k.kind != "device"] + xr.kernels
    report.timeline, report.launches_per_forward = xr.timeline, xr.launches_per_forward
    report.source += "+xctrace"
    report.notes += xr.notes


def warmup_forwards(req: ProfileRequest) -> int:
    """Forwards before the profiled ones: one on the CPU (the interpreter is slow), else two."""
    return req.warmup if req.warmup is not None else (1 if req.device == "cpu" else 2)


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
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)


def ncu_command(spec: Path, metrics: list[str], sections: tuple[str, ...] = ()) -> list[str]:
    """ncu over the runner: the guided-analysis sections the rules read plus their raw metrics, one raw CSV page."""
    return [
        "ncu",
        "--csv",
        "--page",
        "raw",
        "--profile-from-start",
        "off",
        *ncu_args(metrics, sections),
        sys.executable,
        "-m",
        "kforge_mcp.profiling.runner",
        str(spec),
    ]


def _merge_ncu(report: ProfileReport, req: ProfileRequest, workdir: Path) -> None:
    spec = _runner_spec(req, workdir, "ncu", {})
    timeout = req.ncu_timeout_s or NCU_TIMEOUT_S
    # sections + every metric the rules read; if this ncu rejects a name, the core metrics alone
    attempts = [(req.metrics or DEFAULT_METRICS, SECTIONS), (CORE_METRICS, ())]
    for metrics, sections in attempts:
        try:
            proc = _run(ncu_command(spec, metrics, sections), workdir, timeout)
        except subprocess.TimeoutExpired:
            report.notes.append(f"ncu did not finish within {timeout:.0f} s; metrics skipped")
            return
        try:
            ncu_report = ncu_parse.report_from_raw(proc.stdout, "<ncu stdout>", forwards=1)
            keep_raw(report, "ncu.csv", proc.stdout)
            break
        except ncu_parse.ProfileParseError as e:
            tail = (proc.stderr or "")[-600:]
            failure = f"ncu (exit {proc.returncode}) gave no metrics: {e}; {tail.strip()}"
    else:
        report.notes.append(failure)
        return
    merge_ncu(report, ncu_report)


def keep_raw(report: ProfileReport, name: str, text: str) -> None:
    """The profiler's own file, for the tool to keep as a resource; past RAW_MAX_BYTES only a note."""
    if len(text) > RAW_MAX_BYTES:
        report.notes.append(f"{name} ({len(text) / 1e6:.1f} MB) is too large to keep as a resource")
    else:
        report.raw[name] = text


def merge_ncu(report: ProfileReport, ncu_report: ProfileReport) -> None:
    """Put ncu's per-kernel metrics on the timeline's kernels: by exact name, then by launch order."""
    fields = [
        f
        for f in KernelProfile.model_fields
        if f not in ("name", "kind", "launches", "device_ms", "mean_ms", "launches_per_forward", "metrics")
    ]
    timeline = report.device_kernels()
    unmatched = [k for k in timeline]
    for nk in ncu_report.kernels:
        target = next((k for k in unmatched if k.name == nk.name), None) or (unmatched[0] if unmatched else None)
        if target is None:
            nk.launches_per_forward = nk.launches
            report.kernels.append(nk)
            continue
        unmatched.remove(target)
        for f in fields:
            v = getattr(nk, f)
            if v not in (None, [], {}):
                setattr(target, f, v)
        target.metrics["ncu_mean_ms"] = nk.mean_ms
        target.metrics.update(nk.metrics)
    report.sm_count = ncu_report.sm_count or report.sm_count
    report.source = "torch.profiler+ncu"
    report.notes.append(
        "ncu metrics are from one forward under ncu (clocks locked by ncu's default); device times are torch.profiler's"
    )


def _merge_proton(report: ProfileReport, req: ProfileRequest, workdir: Path) -> None:
    name = str(workdir / "proton")
    spec = _runner_spec(req, workdir, "proton", {"proton_name": name, "iterations": req.iterations})
    try:
        proc = _run([sys.executable, "-m", "kforge_mcp.profiling.runner", str(spec)], workdir, NCU_TIMEOUT_S)
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
