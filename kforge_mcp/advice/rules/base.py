"""The rule framework: a rule is a small function over a normalized ProfileReport that returns
Recommendations with evidence, a concrete action and an expected gain.

expected_gain is the fraction of the profiled device time the change should save: one minus
the estimated time after the change over the time now, each rule saying how in gain_basis.
No gain exceeds what the roofline leaves (1 - T_SOL / T): nothing beats the bound.

Add a rule: write ``def my_rule(report) -> list[Recommendation]`` and decorate it with
``@rule``; it then runs in every analysis.
"""

from __future__ import annotations

from collections.abc import Callable

from kforge_mcp.advice.kinds import TENSOR_PIPES, classify_all
from kforge_mcp.profiling.report import Evidence, KernelProfile, Priority, ProfileReport, Recommendation

Rule = Callable[[ProfileReport], list[Recommendation]]
RULES: list[Rule] = []
DEFAULT_SM_COUNT = 132  # H100 SXM; used when the profile does not say
MIN_SHARE = 0.05  # kernels under 5% of the time get no advice of their own


def rule(fn: Rule) -> Rule:
    RULES.append(fn)
    return fn


PRIORITY_RANK = {"high": 0, "medium": 1, "low": 2}


def priority_for(gain: float) -> Priority:
    return "high" if gain >= 0.25 else "medium" if gain >= 0.08 else "low"


def recommendation(**kw) -> Recommendation:
    kw["expected_gain"] = round(max(0.0, min(0.95, kw["expected_gain"])), 3)
    kw.setdefault("priority", priority_for(kw["expected_gain"]))
    return Recommendation(**kw)


def shares(report: ProfileReport) -> dict[str, float]:
    ks = report.device_kernels()
    total = sum(k.device_ms for k in ks)
    return {k.name: (k.device_ms / total if total > 0 else 0.0) for k in ks}


def hot_kernels(report: ProfileReport, min_share: float = MIN_SHARE) -> list[tuple[KernelProfile, float]]:
    share = shares(report)
    return [(k, share[k.name]) for k in report.device_kernels() if share.get(k.name, 0) >= min_share]


def pct(v: float | None) -> str | None:
    return None if v is None else f"{v:.1f}%"


def ev(metric: str, value, good: str = "", kernel: str | None = None) -> Evidence:
    return Evidence(metric=metric, value=value, good=good, kernel=kernel)


def busiest_unit(k: KernelProfile, count_fma: bool = True) -> tuple[str, float]:
    """The kernel's busiest unit and its % of peak: DRAM, a tensor pipe, or (outside GEMMs) the FMA/ALU pipes."""
    units = {"DRAM": k.dram_throughput_pct}
    for p in TENSOR_PIPES:
        units[f"{p} pipe"] = k.pipes.get(p)
    if k.tensor_pipe_pct is not None and not any(k.pipes.get(p) for p in TENSOR_PIPES):
        units["tensor pipe"] = k.tensor_pipe_pct
    if count_fma:
        units["FMA pipe"] = k.fma_pipe_pct
        units["ALU pipe"] = k.pipes.get("alu")
    known = {n: v for n, v in units.items() if v is not None}
    return max(known.items(), key=lambda x: x[1]) if known else ("", 0.0)


def remaining(report: ProfileReport) -> float | None:
    """1 - T_SOL / T: the most any change can save, when the roofline is known and holds."""
    r = report.roofline
    if r is None or r.fraction_of_sol is None:
        return None
    return max(0.0, 1.0 - r.fraction_of_sol)


def run_rules(report: ProfileReport, rules: list[Rule] | None = None) -> tuple[list[Recommendation], list[str]]:
    """Every rule's recommendations, the biggest lever first (a stop at the limit leads when it covers
    most of the time, Nsight Compute's own rule results come last); errors of a broken rule become notes."""
    roof = report.roofline
    flops_known = bool(roof and roof.flops > 0)
    conv = bool(roof and roof.kind and roof.kind.startswith("convolution"))
    classify_all(report.device_kernels(), flops_known, conv)
    recs, notes = [], []
    for fn in rules if rules is not None else RULES:
        try:
            recs += fn(report)
        except Exception as e:  # noqa: BLE001  (one broken rule must not lose the others' advice)
            notes.append(f"rule {fn.__name__} failed: {type(e).__name__}: {e}")
    cap = remaining(report)
    if cap is not None:
        for r in recs:
            if r.expected_gain > cap and not r.stop and not r.lowers_bound:
                r.gain_basis += f"; capped at 1 - T_SOL/T = {cap:.3f} (no change beats the bound)"
                r.expected_gain = round(cap, 3)
                lower = priority_for(r.expected_gain)
                if PRIORITY_RANK[lower] > PRIORITY_RANK[r.priority]:
                    r.priority = lower  # never raised: a rule that set a lower priority keeps it
    lever = max((r for r in recs if r.lowers_bound), key=lambda r: r.expected_gain, default=None)
    if lever is not None and lever.priority != "low":
        for r in recs:  # at the limit of this bound, but the problem allows a lower one
            if r.stop:
                r.stop = False
                r.action += f" The reference's structure allows less work, though: {lever.title}."
    # Nsight Compute's own estimates are not calibrated against measured gains: they follow the calibrated rules
    recs.sort(key=lambda r: (not r.stop, r.rule.startswith("ncu:"), -r.expected_gain, PRIORITY_RANK[r.priority]))
    return recs, notes
