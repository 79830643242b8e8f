"""profile: a candidate (or the reference) run under the profilers in a worker; its roofline then taken from
the compute paths measured meanwhile, or modeled for a named device."""

from __future__ import annotations

import threading
import time
from typing import Any

from kforge_mcp.core.errors import InputError, KforgeError
from kforge_mcp.core.options import CompileCall, ProfileCall
from kforge_mcp.core.requests import InternalFailure, ProfileRequest
from kforge_mcp.core.schemas import Roofline
from kforge_mcp.engine.compile import compile_candidate
from kforge_mcp.engine.parts import EngineParts, Progress
from kforge_mcp.engine.paths import ComputePaths
from kforge_mcp.engine.replies import failure_errors, report_of
from kforge_mcp.engine.roofline import roofline
from kforge_mcp.profiling.report import ProfileReport
from kforge_mcp.runtime.pool import JobCancelled, WorkerFailure


def profile(
    parts: EngineParts,
    call: ProfileCall,
    peaks: dict[str, Any] | None = None,
    on_progress: Progress = None,
    cancel: threading.Event | None = None,
) -> ProfileReport:
    """``peaks`` ({flops, bandwidth}) stand in for the device's table peaks in the roofline."""
    from kforge_mcp.judge.roofline import table_device

    started = time.perf_counter()
    model = table_device(call.device_model) if call.device_model else None  # a name the table lacks fails first
    prob = parts.resolve_source(call.problem, "problem")
    cand = parts.resolve_source(call.candidate, "candidate") if call.candidate else None
    dev = parts.device_for(call.target, call.device)
    request = ProfileRequest.of(call, problem=prob, candidate=cand, device=dev, peaks=peaks)
    paths = parts.paths.soon(prob, (None, None, None), call.timeout_s)  # measured on the CPU meanwhile
    try:
        reply = parts.executor.run(dev, request, call.timeout_s, on_progress, cancel)
    except JobCancelled:
        raise
    except WorkerFailure as e:
        return ProfileReport(
            target=call.target, device=dev, errors=failure_errors(e), seconds=time.perf_counter() - started
        )
    report = report_of(reply, ProfileReport)
    if isinstance(report, InternalFailure):
        report = ProfileReport(target=call.target, device=dev, errors=failure_errors(report))
    if report.roofline is not None:
        waited = time.perf_counter()
        m = ComputePaths.result(paths, ComputePaths.deadline(started + call.timeout_s), report.notes)
        report.phases["paths_wait"] = round(time.perf_counter() - waited, 4)
        if m is not None:
            from kforge_mcp.judge.structure import carry_levers, measured_roofline

            old, given = report.roofline, peaks or {}
            flops, bandwidth = given.get("flops"), given.get("bandwidth")
            report.roofline = carry_levers(measured_roofline(m, old.device, old.measured_ms, flops, bandwidth), old)
            report.roofline.notes += [n for n in old.notes if n not in report.roofline.notes]
    if model and not report.errors:
        try:
            report.roofline = modeled_roofline(parts, call, model, report, peaks)
        except KforgeError as e:  # the profile stands; say why the named device's bound is missing
            report.notes.append(f"no {model} roofline: {e}")
    if call.candidate and dev.startswith("cpu") and not report.errors:  # no GPU ran the kernels: advice reads the build
        report.compiled = compiled_for_advice(parts, call, model, report.notes)
    report.seconds = time.perf_counter() - started
    return report


def compiled_for_advice(parts: EngineParts, call: ProfileCall, model: str | None, notes: list[str]):
    """The candidate compiled for the device model's NVIDIA arch (the default arch without one): the registers,
    spills, warps, stages and MMA instructions the analysis reads where no GPU ran the kernels."""
    from kforge_mcp.platforms import device_arch

    if not parts.target_status(call.target).can_compile:
        return None
    build = CompileCall(target=call.target, source=call.candidate, arch=device_arch(model), problem=call.problem)
    try:
        built = compile_candidate(parts, build.model_copy(update={"timeout_s": call.timeout_s}))
    except KforgeError as e:
        notes.append(f"not compiled for an NVIDIA arch ({e}): no advice from its registers or instructions")
        return None
    if not built.ok:
        first = built.diagnostics[0].message if built.diagnostics else "no diagnostic"
        notes.append(f"not compiled for {built.arch} ({first}): no advice from its registers or instructions")
        return None
    return built


def modeled_roofline(
    parts: EngineParts, call: ProfileCall, model: str, report: ProfileReport, peaks: dict[str, Any] | None
) -> Roofline:
    """The named device's roofline for the reference. The profile's measured time is set against it only when
    the profile ran on that very device; otherwise the bound stands alone."""
    from kforge_mcp.judge.roofline import table_device

    local = report.roofline
    try:
        here = table_device(report.device_name or "") if not (report.device or "cpu").startswith("cpu") else None
    except InputError:
        here = None
    measured = local.measured_ms if local is not None and here == model else None
    r = roofline(parts, call.problem, device_name=model, measured_ms=measured, peaks=peaks, timeout_s=call.timeout_s)
    r.modeled = True
    where = "measured here on the same device" if measured else f"no time measured on {model} here"
    r.notes.append(f"a model: the {model} bound from its table peaks ({r.peaks_source}); {where}")
    return r
