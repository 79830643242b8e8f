"""The rules the agent runs, listed here in one place (each module holds the rules of one concern):

memory: coalescing, bank conflicts, spills, atomics. compute: at the limit, issue-bound. epilogue: an
epilogue's logs computed by a polynomial. tile_sums: a tile's sums reduced across threads every tile.
tensor_cores: tensor cores, feeding the tensor pipe. direct_conv: a small convolution off the tensor cores. conv: a
convolution's tensor-core kernel waiting on its own gathers.
fusion: fused launches and epilogues. launch: latency-bound kernels, grid size, ncu's own rules.
structure: levers of the reference's FX graph, work on weights alone. timeline: device idle gaps and
Intel XVE counters. compiled: the candidate compiled for an NVIDIA arch where no GPU ran it.

``run_rules`` runs those whose needs the report meets and lists the others with the reason; the
ranking (ranking.py) makes one ordered list of what they say.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.kinds import classify_all
from kforge_mcp.advice.rules.base import Rule, Wording, hot_kernels, priority_for, recommendation, shares
from kforge_mcp.advice.rules.compiled import (
    compiled_occupancy,
    compiled_pipeline,
    compiled_spills,
    compiled_tensor_cores,
)
from kforge_mcp.advice.rules.compute import at_the_limit, issue_bound
from kforge_mcp.advice.rules.conv import gather_fed_conv
from kforge_mcp.advice.rules.direct_conv import direct_conv
from kforge_mcp.advice.rules.epilogue import epilogue_logs
from kforge_mcp.advice.rules.fed import feed_tensor_pipe
from kforge_mcp.advice.rules.fusion import fuse_launches
from kforge_mcp.advice.rules.launch import grid_too_small, latency_bound, ncu_own_rules
from kforge_mcp.advice.rules.memory import atomic_contention, register_spills, shared_bank_conflicts, uncoalesced_access
from kforge_mcp.advice.rules.ranking import rank
from kforge_mcp.advice.rules.serialized import mma_serialized
from kforge_mcp.advice.rules.split import split_once
from kforge_mcp.advice.rules.structure import adopt_taken_lever, reference_structure, weights_once
from kforge_mcp.advice.rules.tensor_cores import use_tensor_cores
from kforge_mcp.advice.rules.tile_sums import tile_sums
from kforge_mcp.advice.rules.timeline import device_idle_gaps, xve_idle, xve_stalled
from kforge_mcp.profiling.report import ProfileReport, Recommendation, RuleNotRun

RULES: tuple[Rule[Any], ...] = (
    uncoalesced_access,
    shared_bank_conflicts,
    register_spills,
    atomic_contention,
    at_the_limit,
    use_tensor_cores,
    direct_conv,
    feed_tensor_pipe,
    gather_fed_conv,
    split_once,
    tile_sums,
    mma_serialized,
    issue_bound,
    epilogue_logs,
    fuse_launches,
    latency_bound,
    grid_too_small,
    ncu_own_rules,
    reference_structure,
    weights_once,
    device_idle_gaps,
    xve_stalled,
    xve_idle,
    compiled_tensor_cores,
    compiled_pipeline,
    compiled_spills,
    compiled_occupancy,
)


class RuleRun(NamedTuple):
    recommendations: list[Recommendation]  # ranked
    no_gain: list[Recommendation]  # priced at no gain: not ranked
    notes: list[str]
    not_run: list[RuleNotRun]


def run_rules(report: ProfileReport, rules: Sequence[Rule[Any]] = RULES) -> RuleRun:
    """The recommendations of every rule the report has the parts for, ranked (ranking.py), and those priced at no
    gain; the rules it lacks the parts for, each with what it needs; a broken rule's error as a note, the others'
    advice kept."""
    adopt_taken_lever(report)
    roof = report.roofline
    flops_known = bool(roof and roof.flops > 0)
    conv = bool(roof and roof.kind and roof.kind.startswith("convolution"))
    classify_all(report.device_kernels(), vocabulary.of(report), flops_known, conv)
    recs: list[Recommendation] = []
    notes: list[str] = []
    not_run: list[RuleNotRun] = []
    for rule in rules:
        reason = rule.why_not(report)
        if reason is not None:
            not_run.append(RuleNotRun(rule=rule.name, reason=reason))
            continue
        try:
            recs += rule(report)
        except Exception as e:  # noqa: BLE001  (one broken rule must not lose the others' advice)
            notes.append(f"rule {rule.name} failed: {type(e).__name__}: {e}")
    ranked, no_gain = rank(report, recs)
    return RuleRun(ranked, no_gain, notes, not_run)


__all__ = [
    "RULES",
    "Rule",
    "RuleRun",
    "Wording",
    "at_the_limit",
    "atomic_contention",
    "compiled_occupancy",
    "compiled_pipeline",
    "compiled_spills",
    "compiled_tensor_cores",
    "device_idle_gaps",
    "direct_conv",
    "epilogue_logs",
    "feed_tensor_pipe",
    "fuse_launches",
    "gather_fed_conv",
    "grid_too_small",
    "hot_kernels",
    "issue_bound",
    "latency_bound",
    "mma_serialized",
    "ncu_own_rules",
    "priority_for",
    "recommendation",
    "reference_structure",
    "register_spills",
    "run_rules",
    "shared_bank_conflicts",
    "shares",
    "split_once",
    "tile_sums",
    "uncoalesced_access",
    "use_tensor_cores",
    "weights_once",
    "xve_idle",
    "xve_stalled",
]
