"""One ranked list from every rule's recommendations: each gain capped by what the bound leaves, one
recommendation per change (two rules that propose the same change are merged, the larger and
better-founded gain kept with both evidences), advice priced at no gain set apart (a stop at the
limit is a verdict and stays; so does an estimate whose range reaches a gain), a stop only while no
advice of medium or high priority is left, and an order that agrees with priority: high, then
medium, then low; within a priority the calibrated rules before Nsight Compute's own estimates (not
calibrated against measured gains), and the larger gain first.
"""

from __future__ import annotations

from kforge_mcp.advice.rules.base import PRIORITY_RANK, RANKING, RankingThresholds, priority_for, remaining
from kforge_mcp.profiling.report import ProfileReport, Recommendation


def cap_by_bound(report: ProfileReport, recs: list[Recommendation]) -> None:
    """No gain exceeds 1 - T_SOL / T, except a stop's and a lever that lowers the bound itself."""
    cap = remaining(report)
    if cap is None:
        return
    for r in recs:
        if r.expected_gain > cap and not r.stop and not r.lowers_bound:
            r.gain_basis += f"; capped at 1 - T_SOL/T = {cap:.3f} (no change beats the bound)"
            r.expected_gain = round(cap, 3)
            lower = priority_for(r.expected_gain)
            if PRIORITY_RANK[lower] > PRIORITY_RANK[r.priority]:
                r.priority = lower  # never raised: a rule that set a lower priority keeps it


def merge(first: Recommendation, second: Recommendation) -> Recommendation:
    """One recommendation for one change: the larger gain (measured on the profile before modelled, at a tie)
    with its title and action, and the evidence of both."""
    keep, other = sorted((first, second), key=lambda r: (r.expected_gain, not r.lowers_bound), reverse=True)
    return keep.model_copy(
        update={
            "evidence": keep.evidence + [e for e in other.evidence if e not in keep.evidence],
            "gain_basis": f"{keep.gain_basis}; {other.rule} priced the same change at {other.expected_gain:.3f} "
            f"({other.gain_basis})",
            "kernels": keep.kernels + [k for k in other.kernels if k not in keep.kernels],
            "also_from": [*keep.also_from, other.rule, *other.also_from],
        }
    )


def one_per_change(recs: list[Recommendation]) -> list[Recommendation]:
    out: list[Recommendation] = []
    for r in recs:
        same = next((i for i, o in enumerate(out) if r.change is not None and o.change == r.change), None)
        if same is None:
            out.append(r)
        else:
            out[same] = merge(out[same], r)
    return out


def withdraw_stop(recs: list[Recommendation]) -> None:
    """A stop stands only while everything else is low priority."""
    left = max((r for r in recs if not r.stop), key=lambda r: r.expected_gain, default=None)
    if left is None or left.priority == "low":
        return
    for r in recs:
        if r.stop:
            r.stop = False
            r.action += (
                f" The reference's structure allows less work, though: {left.title}."
                if left.lowers_bound
                else f" Other advice is left, though: {left.title}."
            )


def rank(
    report: ProfileReport, recs: list[Recommendation], t: RankingThresholds = RANKING
) -> tuple[list[Recommendation], list[Recommendation]]:
    """The ranked advice, and the advice priced at no gain."""
    cap_by_bound(report, recs)
    recs = one_per_change(recs)
    withdraw_stop(recs)
    gains = [r for r in recs if r.stop or max(r.expected_gain, r.expected_gain_high or 0.0) >= t.negligible_gain]
    ranked = sorted(
        gains,
        # at equal gain a lever of the problem's structure leads: it removes work every later change would do
        key=lambda r: (
            not r.stop,
            PRIORITY_RANK[r.priority],
            r.rule.startswith("ncu:"),
            -r.expected_gain,
            not r.lowers_bound,
        ),
    )
    return ranked, [r for r in recs if r not in gains]
