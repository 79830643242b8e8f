"""roofline: the reference's speed-of-light bound, its compute paths measured on the problem's own inputs at
the tolerance, and the levers of its structure (its FX graph, read in the same worker)."""

from __future__ import annotations

from typing import Any

from kforge_mcp.core.options import DEFAULT_TIMEOUT_S
from kforge_mcp.core.schemas import Roofline
from kforge_mcp.engine.parts import EngineParts


def roofline(
    parts: EngineParts,
    problem: str,
    device_name: str | None = None,
    measured_ms: float | None = None,
    peaks: dict[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    atol: float | None = None,
    rtol: float | None = None,
) -> Roofline:
    from kforge_mcp.judge.structure import measured_roofline

    m = parts.paths.measured(parts.resolve_source(problem, "problem"), (None, atol, rtol), timeout_s)
    peaks = peaks or {}
    return measured_roofline(m, device_name, measured_ms, peaks.get("flops"), peaks.get("bandwidth"))
