"""Performance rules, one module per concern; importing them registers them (in this order).

compute: at the limit, tensor cores, feeding the tensor pipe. memory: coalescing, bank conflicts,
spills, atomics. launch: fused launches, latency-bound kernels, grid size, ncu's own rules.
timeline: device idle gaps and Intel XVE counters. structure: levers of the reference's FX graph.
"""

from kforge_mcp.advice.rules import compute, launch, memory, structure, timeline
from kforge_mcp.advice.rules.base import RULES, Rule, hot_kernels, priority_for, recommendation, rule, run_rules, shares
from kforge_mcp.advice.rules.compute import at_the_limit, feed_tensor_pipe, issue_bound, use_tensor_cores
from kforge_mcp.advice.rules.launch import fuse_launches, grid_too_small, latency_bound, ncu_own_rules
from kforge_mcp.advice.rules.memory import atomic_contention, register_spills, shared_bank_conflicts, uncoalesced_access
from kforge_mcp.advice.rules.structure import reference_structure
from kforge_mcp.advice.rules.timeline import device_idle_gaps, xve_idle, xve_stalled

__all__ = [
    "RULES",
    "Rule",
    "at_the_limit",
    "atomic_contention",
    "compute",
    "device_idle_gaps",
    "feed_tensor_pipe",
    "fuse_launches",
    "grid_too_small",
    "hot_kernels",
    "issue_bound",
    "latency_bound",
    "launch",
    "memory",
    "ncu_own_rules",
    "priority_for",
    "recommendation",
    "reference_structure",
    "register_spills",
    "rule",
    "run_rules",
    "shared_bank_conflicts",
    "shares",
    "structure",
    "timeline",
    "uncoalesced_access",
    "use_tensor_cores",
    "xve_idle",
    "xve_stalled",
]
