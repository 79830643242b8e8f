"""verify: a candidate checked against its reference and timed in a worker on the call's device; on a GPU,
its bound then taken again from the compute paths measured on the problem's inputs meanwhile."""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import Future

from kforge_mcp.core.options import VerifyCall
from kforge_mcp.core.requests import InternalFailure, VerifyRequest, WarmUpRequest
from kforge_mcp.core.schemas import VerifyReport
from kforge_mcp.engine.parts import EngineParts, Progress
from kforge_mcp.engine.paths import ComputePaths
from kforge_mcp.engine.replies import failure_diagnostic, failure_errors, report_of
from kforge_mcp.judge.pipeline import head_start_one
from kforge_mcp.judge.precision_paths import MeasuredPaths
from kforge_mcp.runtime.pool import JobCancelled, WorkerFailure
from kforge_mcp.targets import get_target

PROFILERS_AHEAD_TIMEOUT_S = 120


def verify(
    parts: EngineParts,
    call: VerifyCall,
    on_progress: Progress = None,
    cancel: threading.Event | None = None,
    head_start: bool = True,
) -> VerifyReport:
    """``head_start``: see pipeline.head_start_one (a batch starts its own)."""
    started = time.perf_counter()
    prob = parts.resolve_source(call.problem, "problem")
    cand = parts.resolve_source(call.candidate, "candidate")
    dev = parts.device_for(call.target, call.device)
    request = VerifyRequest.of(call, problem=prob, candidate=cand, device=dev)
    error = dict(verdict="error", correct=False, target=call.target, device=dev, trials=call.trials, seed=call.seed)
    error |= dict(execution=get_target(call.target).execution(dev), precision=call.precision)
    # the paths' errors are measured on the CPU while the device verifies (a GPU verify gets a bound)
    tolerance = (call.precision, call.atol, call.rtol)
    paths = parts.paths.soon(prob, tolerance, call.timeout_s) if dev != "cpu" else None
    try:
        if head_start:
            head_start_one(parts, request, on_progress, cancel)
        reply = parts.executor.run(dev, request, call.timeout_s, on_progress, cancel)
    except JobCancelled:
        raise
    except WorkerFailure as e:
        seconds = time.perf_counter() - started
        return VerifyReport(
            **error, errors=failure_errors(e), diagnostics=[failure_diagnostic(e, cand)], seconds=seconds
        )
    report = report_of(reply, VerifyReport)
    if isinstance(report, InternalFailure):
        return VerifyReport(**error, errors=failure_errors(report), seconds=time.perf_counter() - started)
    report.node = reply.node  # where a cluster executor ran it
    profilers_soon(parts, dev)
    if paths is not None and report.sol_ms is not None and report.timing is not None:
        waited = time.perf_counter()
        bound_from_paths(report, paths, parts.paths.verify_deadline(paths, started + call.timeout_s))
        report.phases["paths_wait"] = round(time.perf_counter() - waited, 4)
    return report


def profilers_soon(parts: EngineParts, device: str) -> None:
    """The first profile's metrics profiler program launched by the device's worker while it idles after this verify
    (profiling/ahead.py): not while a job waits for that worker, nor on the CPU, nor with the setting off."""
    if device == "cpu" or not parts.settings.profile_spare_on:
        return
    request = WarmUpRequest(device=device, stage="profilers")

    def ready() -> None:
        with contextlib.suppress(Exception):  # a head start only: the profile readies them itself otherwise
            parts.executor.warm_up(device, request, PROFILERS_AHEAD_TIMEOUT_S, after_work=True)

    threading.Thread(target=ready, daemon=True, name="kforge-profilers-ahead").start()


def bound_from_paths(report: VerifyReport, paths: Future[MeasuredPaths], deadline: float) -> None:
    """The verify's bound again, its path taken from the paths measured on the problem's inputs."""
    from kforge_mcp.judge.roofline import set_verify_bound
    from kforge_mcp.judge.structure import measured_roofline

    notes: list[str] = []
    m = ComputePaths.result(paths, deadline, notes)
    if m is not None and report.timing is not None and report.timing.candidate is not None:
        ms = report.timing.candidate.median_ms
        set_verify_bound(report, measured_roofline(m, report.device_state.get("name"), ms), ms)
    report.sol_path = "; ".join([report.sol_path or "", *notes]).strip("; ")
