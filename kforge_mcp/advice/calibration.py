"""The analysis agent scored against measurements. ``analyze_measured`` runs it on a captured profile
with the roofline of the workload and the time measured outside the profiler (ncu locks the clocks);
``calibrate`` sets the expected gain of the rule each before/after pair follows against the gain the
change realized. ``bench/advice_calibration.py`` runs it on the captured pairs and writes the record."""

from __future__ import annotations

import statistics

from pydantic import BaseModel, Field

from kforge_mcp.advice.agent import analyze
from kforge_mcp.judge.roofline import make_roofline, with_measured
from kforge_mcp.profiling.report import AnalysisReport, ProfileReport

HELPS = 0.05  # a gain under 5% is within timing noise and not worth a round
TARGET_SIGN = 0.9  # share of pairs whose rule promises >= HELPS exactly when the change saves >= HELPS
HARM = -0.05  # no medium- or high-priority advice may make its kernel slower than this
TARGET_GAP = 10.0  # median gap between predicted and realized gain, in points


class Workload(BaseModel):
    """What a captured kernel's roofline needs: its FLOPs and minimum bytes, its dtype, and the tolerance
    that settles its compute path."""

    flops: float
    bytes: float
    dtype: str = "fp32"
    atol: float | None = None
    rtol: float | None = None


def analyze_measured(
    report: ProfileReport, workload: Workload, device: str | None, measured_ms: float | None
) -> AnalysisReport:
    """The agent's advice on ``report``, whose roofline this sets: ``workload`` on ``device``, at ``measured_ms``."""
    roof = make_roofline(workload.flops, workload.bytes, workload.dtype, device, atol=workload.atol, rtol=workload.rtol)
    report.roofline = with_measured(roof, measured_ms)
    return analyze(report)


class Pair(BaseModel):
    """A kernel and the change one rule's advice asks for (the same computation), both timed, the
    kernel before the change profiled."""

    name: str
    rule: str
    change: str
    workload: Workload | None = Field(
        None, description="the roofline's workload; None where ``before`` carries its problem's roofline already"
    )
    before_ms: float = Field(description="median time of the kernel before the change")
    after_ms: float = Field(description="median time after it")
    before: ProfileReport


class PairScore(BaseModel):
    pair: str
    rule: str
    change: str
    before_ms: float
    after_ms: float
    predicted: float = Field(description="the expected gain of the pair's rule; 0 when the rule does not fire")
    realized: float = Field(description="1 - after / before")
    priority: str = Field(description="the rule's priority, or 'not fired'")
    gap_points: float = Field(description="|predicted - realized| in points")
    sign_right: bool = Field(description="the rule promises >= HELPS exactly when the change saved >= HELPS")
    harmful: bool = Field(description="medium- or high-priority advice that made the kernel slower than HARM")
    top: list[str] = Field(description="the agent's first three recommendations: rule and expected gain")
    kinds: list[str] = Field(description="category/compute path of each device kernel before the change")
    gain_basis: str


class Calibration(BaseModel):
    device: str
    scores: list[PairScore]
    rules: int
    sign_right: float = Field(description="share of pairs whose sign is right")
    harmful: list[str] = Field(description="pairs where medium- or high-priority advice made the kernel slower")
    median_gap_points: float | None
    ok: bool = Field(description="every target met: TARGET_SIGN, no harmful advice, TARGET_GAP")


def score(pair: Pair, device: str) -> PairScore:
    report = pair.before.model_copy(deep=True)
    if pair.workload is not None:
        analysis = analyze_measured(report, pair.workload, device, pair.before_ms)
    else:
        analysis = analyze(report)
    rec = next((r for r in analysis.recommendations if r.rule == pair.rule), None)
    predicted = rec.expected_gain if rec else 0.0
    realized = 1 - pair.after_ms / pair.before_ms
    return PairScore(
        pair=pair.name,
        rule=pair.rule,
        change=pair.change,
        before_ms=pair.before_ms,
        after_ms=pair.after_ms,
        predicted=predicted,
        realized=realized,
        priority=rec.priority if rec else "not fired",
        gap_points=abs(predicted - realized) * 100,
        sign_right=(predicted >= HELPS) == (realized >= HELPS),
        harmful=bool(rec and rec.priority in ("medium", "high") and realized < HARM),
        top=[f"{r.rule} {r.expected_gain:.2f}" for r in analysis.recommendations[:3]],
        kinds=sorted({f"{k.category}/{k.compute_path or '-'}" for k in report.device_kernels()}),
        gain_basis=rec.gain_basis if rec else "",
    )


def calibrate(pairs: list[Pair], device: str) -> Calibration:
    scores = [score(p, device) for p in pairs]
    sign_right = sum(s.sign_right for s in scores) / max(len(scores), 1)
    harmful = [s.pair for s in scores if s.harmful]
    gap = statistics.median(s.gap_points for s in scores) if scores else None
    return Calibration(
        device=device,
        scores=scores,
        rules=len({s.rule for s in scores}),
        sign_right=sign_right,
        harmful=harmful,
        median_gap_points=gap,
        ok=bool(scores and sign_right >= TARGET_SIGN and not harmful and gap is not None and gap <= TARGET_GAP),
    )
