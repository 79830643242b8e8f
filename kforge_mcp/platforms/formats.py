"""What every profile parser shares: a format's description (how it is recognised in a file and read), and the
steps every parser ends with (reading JSON, forwards from launch counts, the device's busy/idle timeline)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kforge_mcp.core.profile import ProfileParseError, ProfileReport

MEMCPY_METRIC = "memcpy_or_memset"  # a metric a parser sets on a timeline's copy or set, which is not a kernel


@dataclass(frozen=True)
class ProfileFormat:
    """A file format a profiler writes. A text format is recognised by ``detect`` on the file's text and its JSON
    (None when it is not JSON) and read by ``parse`` (text, JSON, file name, forwards); a binary one is recognised
    by its ``suffix`` and read by ``read`` (path, forwards)."""

    key: str  # what profiling.loader.detect answers: 'ncu-csv'
    description: str  # how the list of readable formats names it
    detect: Callable[[str, Any], bool] | None = None
    parse: Callable[[str, Any, str, int | None], ProfileReport] | None = None
    suffix: str | None = None
    read: Callable[[Path, int | None], ProfileReport] | None = None


def load_json(text: str, path: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ProfileParseError(
            f"{path}: invalid or truncated JSON at line {e.lineno}, column {e.colno}: {e.msg}"
        ) from None


def infer_forwards(counts: list[int]) -> int:
    """Forwards captured, when nothing marks them: the gcd of per-kernel launch counts (every
    kernel runs a whole number of times per forward)."""
    g = 0
    for c in counts:
        g = math.gcd(g, c)
    return max(g, 1)


def set_forwards(report: ProfileReport, forwards: int | None) -> ProfileReport:
    """Fill a report's per-forward figures from its kernels: ``forwards`` when the capture marks
    them, else inferred from the launch counts (the ncu, proton, unitrace and xctrace parsers end here)."""
    report.forwards_inferred = forwards is None
    report.forwards = forwards or infer_forwards([k.launches for k in report.kernels])
    for k in report.kernels:
        k.launches_per_forward = k.launches / report.forwards
    report.launches_per_forward = sum(k.launches for k in report.kernels) / report.forwards
    report.device_ms_per_forward = sum(k.device_ms for k in report.kernels) / report.forwards
    return report


def busy_timeline(intervals: list[tuple[float, float]]) -> dict[str, float]:
    """Union of (start, end) intervals in ms: span, busy, idle and the gaps between busy runs."""
    if not intervals:
        return {}
    merged: list[list[float]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    span = merged[-1][1] - merged[0][0]
    busy = sum(e - s for s, e in merged)
    gaps = [merged[i + 1][0] - merged[i][1] for i in range(len(merged) - 1)]
    return {
        "span_ms": span,
        "busy_ms": busy,
        "idle_ms": span - busy,
        "gaps": float(len(gaps)),
        "largest_gap_ms": max(gaps, default=0.0),
        "intervals": float(len(intervals)),
    }
