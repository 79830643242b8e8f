"""analyze_profile: the performance-analysis agent over a profile report, a captured profiler file or a
screenshot. Parsing runs here (it runs no submitted code); a problem's roofline is measured in a worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.options import AnalyzeCall
from kforge_mcp.core.problem import check_allowed_path
from kforge_mcp.engine.parts import EngineParts
from kforge_mcp.engine.roofline import roofline
from kforge_mcp.profiling.report import AnalysisReport, ProfileReport


def analyze(
    parts: EngineParts,
    call: AnalyzeCall,
    peaks: dict[str, Any] | None = None,
    max_bytes: int | None = None,
    atol: float | None = None,
    rtol: float | None = None,
) -> AnalysisReport:
    """``peaks`` stand in for the device's table peaks, ``max_bytes`` caps a captured file, ``atol`` and ``rtol``
    choose the roofline's compute path for the problem."""
    from kforge_mcp.advice import agent
    from kforge_mcp.core.profile import ProfileParseError
    from kforge_mcp.judge.roofline import with_measured
    from kforge_mcp.judge.structure import carry_levers
    from kforge_mcp.profiling import loader

    given = call.given()
    if given != "profile":
        check_allowed_path(getattr(call, given), given, parts.allow_dirs)
    if call.image:
        if not Path(call.image).expanduser().is_file():
            raise InputError(f"image: file not found: {call.image}")
        return agent.analyze_image(call.image)
    if call.profile is not None:
        try:
            report = ProfileReport.model_validate(finished_profile(call.profile))
        except InputError:
            raise
        except Exception as e:  # noqa: BLE001  (pydantic's message says which field)
            raise InputError(f"profile: not a ProfileReport: {str(e)[:600]}") from None
        if report.job_id and report.status != "done":
            raise InputError(
                f"profile: a placeholder of job {report.job_id}, {report.status}: pass the report job_result gives "
                "once the job is done"
            )
    else:
        assert call.path is not None  # exactly one of the three was given, neither profile nor image
        try:
            report = loader.load_profile(call.path, forwards=call.forwards, max_bytes=max_bytes or loader.MAX_BYTES)
        except ProfileParseError as e:
            raise InputError(str(e)) from None
    if call.problem:
        device = bound_device(call, report, peaks)
        r = roofline(parts, call.problem, device_name=device, peaks=peaks, atol=atol, rtol=rtol)
        earlier = report.roofline
        where = f"comes from the profile's roofline (checked on {earlier.device})" if earlier else None
        report.roofline = carry_levers(with_measured(r, report.device_ms_per_forward), earlier, where)
    return agent.analyze(report)


def finished_profile(value: dict[str, Any]) -> dict[str, Any]:
    """A profile as given: a ProfileReport, or the wrapper job_result returns for a profile that outlived its
    wait_s ({job_id, tool, status, ..., result}), which stands for its report once the job is done."""
    if "tool" not in value or "job_id" not in value:
        return value
    job, tool, status = value["job_id"], value["tool"], value.get("status")
    if tool != "profile":
        raise InputError(f"profile: the result of job {job} is a {tool} result, not a profile")
    if status != "done" or not isinstance(value.get("result"), dict):
        raise InputError(
            f"profile: job {job} is {status}"
            + (f" ({value['error']})" if value.get("error") else "")
            + ": pass its result once done (job_result waits for it with wait_s)"
        )
    return value["result"]


def bound_device(call: AnalyzeCall, report: ProfileReport, peaks: dict[str, Any] | None) -> str | None:
    """The device a problem's roofline is for: the one asked for, else the one the profile ran on; never a guess.
    A name the peaks table does not know is an input error listing the table, unless the caller gave the peaks."""
    from kforge_mcp.platforms import table_device

    name = call.device_model or report.device_name
    if peaks and not call.device_model:
        return name
    if not name:
        raise InputError(
            "analyze_profile: the profile does not say which device it ran on, so a roofline for the problem would "
            "be a guess: pass device_model (a device of the peaks table, e.g. 'h100')"
        )
    try:
        key = table_device(name)
    except InputError as e:
        if call.device_model:
            raise
        raise InputError(f"analyze_profile: the profile ran on '{name}': {e}; pass device_model") from None
    return key if call.device_model else name
