"""compile: a candidate's kernels built in a worker without running them, the report kept in the compile
cache."""

from __future__ import annotations

import threading
import time

from kforge_mcp.core.errors import InputError, KforgeError
from kforge_mcp.core.options import CompileCall
from kforge_mcp.core.requests import CompileRequest, InternalFailure
from kforge_mcp.core.schemas import CompileReport, Diagnostic
from kforge_mcp.engine.parts import EngineParts, Progress
from kforge_mcp.engine.replies import failure_diagnostic, report_of
from kforge_mcp.runtime.pool import JobCancelled, WorkerFailure
from kforge_mcp.targets import get_target


def compile_candidate(
    parts: EngineParts, call: CompileCall, on_progress: Progress = None, cancel: threading.Event | None = None
) -> CompileReport:
    started = time.perf_counter()
    target = call.target
    src = parts.resolve_source(call.code(), "source")
    prob = parts.resolve_source(call.problem, "problem") if call.problem else None
    status = parts.target_status(target)
    if not status.can_compile and not status.available:
        # checks that need no device (they run no submitted code) still come back, as diagnostics
        static = get_target(target).static_diagnostics(src)
        raise InputError(f"target '{target}' cannot compile here: {status.reason}", static or None)
    arch = call.arch or parts.list_targets().host.get("arch")
    key = parts.compile_cache.key(
        target=target,
        source=src.text,
        problem=prob.text if prob else None,
        arch=arch,
        emit_ptx=call.emit_ptx,
        toolchains=get_target(target).cache_versions(),
        checks="shared-memory-limit,mma",  # reports cached before these checks are not served
    )
    hit = parts.compile_cache.get(key)
    if hit is not None:
        report = CompileReport.model_validate(hit)
        report.cached, report.seconds = True, time.perf_counter() - started
        return report
    request = CompileRequest(target=target, source=src, arch=arch, emit_ptx=call.emit_ptx, problem=prob)
    try:
        reply = parts.executor.run("compile", request, call.timeout_s, on_progress, cancel)
    except JobCancelled:
        raise
    except WorkerFailure as e:
        seconds = time.perf_counter() - started
        return CompileReport(
            ok=False, target=target, arch=arch, seconds=seconds, diagnostics=[failure_diagnostic(e, src)]
        )
    got = report_of(reply, CompileReport)
    if isinstance(got, InternalFailure):
        report = CompileReport(
            ok=False, target=target, arch=arch, diagnostics=[Diagnostic(message=got.message, file=src.name)]
        )
    else:
        report = got
        try:
            parts.compile_cache.put(key, report.model_dump(mode="json"))
        except KforgeError as e:  # a full or read-only home: the compile is still good, say why it is not cached
            report.diagnostics.append(Diagnostic(severity="warning", message=f"not cached: {e}"))
    report.seconds = time.perf_counter() - started
    return report
