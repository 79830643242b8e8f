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
            report = ProfileReport.model_validate(call.profile)
        except Exception as e:  # noqa: BLE001  (pydantic's message says which field)
            raise InputError(f"profile: not a ProfileReport: {str(e)[:600]}") from None
    else:
        assert call.path is not None  # exactly one of the three was given, neither profile nor image
        try:
            report = loader.load_profile(call.path, forwards=call.forwards, max_bytes=max_bytes or loader.MAX_BYTES)
        except ProfileParseError as e:
            raise InputError(str(e)) from None
    if call.problem:
        device = report.device_name or report.device
        r = roofline(parts, call.problem, device_name=device, peaks=peaks, atol=atol, rtol=rtol)
        earlier = report.roofline
        where = f"comes from the profile's roofline (checked on {earlier.device})" if earlier else None
        report.roofline = carry_levers(with_measured(r, report.device_ms_per_forward), earlier, where)
    return agent.analyze(report)
