"""How work is launched: too many kernels per forward, too few programs for the SMs, and kernels
that are latency-bound (idle issue slots, warps stalled on memory, neither memory nor compute
busy). Occupancy is advice only here, for latency-bound kernels that are not tensor-core GEMMs.
Also Nsight Compute's own rule results, when the details page carries them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.kinds import busiest_tensor_pipe, is_latency_bound
from kforge_mcp.advice.rules.base import (
    DEVICE_KERNELS,
    ISSUE_SLOTS_OR_LAUNCH_SHAPE,
    LAUNCH_GRIDS,
    NCU_RULE_RESULTS,
    RANKING,
    SM_COUNT,
    WARP_SIZE,
    Rule,
    Wording,
    ev,
    hot_kernels,
    recommendation,
    shares,
)
from kforge_mcp.advice.rules.base import pct as _pct
from kforge_mcp.advice.rules.memory import memory_pathology
from kforge_mcp.judge.roofline import output_floor
from kforge_mcp.platforms.base import Vocabulary
from kforge_mcp.profiling.report import Evidence, NcuRule, ProfileReport, Recommendation


@dataclass(frozen=True)
class LaunchThresholds:
    latency_advice_issue_pct: float = 60.0  # issue slots busy below this, with warps stalled: latency advice fires
    # (a choice, looser than kinds' waiting_issue_pct, 40, the mark of a GEMM or conv whose math pipe idles for latency)
    busy_unit_pct: float = 78.0  # ... and neither memory nor SM throughput above this (a row sum at 72% gained 14%;
    # within 2 points of target_pct nothing is left to gain)
    target_pct: float = 80.0  # a latency-bound kernel with enough bytes in flight reaches ~80% of its busiest unit
    min_kernel_ms: float = 0.01  # under ~10 us a launch's ramp-up and tail dominate its utilisation figures
    min_launches: float = 2.0  # two kernels a forward or more are a chain to fuse
    busy_compute_pct: float = 50.0  # a GEMM/conv whose tensor or FMA pipe is this busy is compute-bound for fusion
    epilogue_statistics_cost: float = 0.15  # a conv kernel that takes on the statistics of what follows grows by
    # this share of its time (per-tile reductions and atomics; on the H100 conv trajectories it grew 8%, 14%, 26%)
    enough_warps: float = 4.0  # 4 warps (128 threads) per program: with fewer an SM holds too few warps to hide a
    # load (1-warp programs made 4-8 warps wide realized 0.79-0.89 on an H200: latency_softmax, latency_tiny_blocks)
    enough_occupancy_pct: float = 25.0  # achieved occupancy this high holds enough warps: more of them do not help (a
    # GroupNorm pass at 35% taken to 70% by halving its registers gained 2.5%, 14% promised)
    register_limited_occupancy_pct: float = 50.0  # registers capping theoretical occupancy under this name the
    # registers as the cause (a choice: half the SM's warps)
    ncu_min_speedup_pct: float = 10.0  # Nsight Compute estimates under 10% are left out (a choice)
    ncu_overlap_factor: float = 0.5  # ncu's estimates are per-kernel upper bounds that overlap one another
    ncu_top: int = 3  # at most this many of ncu's own rule results


LAUNCH = LaunchThresholds()


def _occupancy_evidence(k, v: Vocabulary, warps: float | None, t: LaunchThresholds) -> list:
    """What a latency-bound kernel shows of its occupancy: warps per block, achieved and theoretical occupancy,
    its top stall."""
    evidence = []
    if warps is not None:
        evidence.append(
            ev("warps per block", warps, f">= {t.enough_warps:g} ({t.enough_warps * v.warp_size:g}+ threads)", k.name)
        )
    if k.achieved_occupancy_pct is not None:
        evidence.append(
            ev("achieved occupancy", _pct(k.achieved_occupancy_pct), f">= {t.enough_occupancy_pct:g}%", k.name)
        )
    if k.theoretical_occupancy_pct is not None and k.theoretical_occupancy_pct < 100:
        evidence.append(
            ev(
                "theoretical occupancy",
                _pct(k.theoretical_occupancy_pct),
                f"limited by {k.occupancy_limiter or '?'}",
                k.name,
            )
        )
    if k.top_stalls:
        s = k.top_stalls[0]
        evidence.append(ev(f"top stall: {s.reason}", s.cycles_per_issue, "few cycles per issue", k.name))
    return evidence


def _latency_cause(k, warps: float | None, latency_kind: bool, t: LaunchThresholds) -> str:
    """Why the kernel waits on latency, as a key of LATENCY_WORDING."""
    if latency_kind and k.category in ("gemm", "conv"):
        return "tiles"
    if warps is not None and warps < t.enough_warps:
        return "few_warps"
    if (
        k.occupancy_limiter == "registers"
        and (k.theoretical_occupancy_pct or 100) < t.register_limited_occupancy_pct
        and (k.achieved_occupancy_pct or 0) < t.enough_occupancy_pct
    ):
        return "registers"
    return "ilp"


def _latency_bound(report: ProfileReport, t: LaunchThresholds) -> list[Recommendation]:
    hits, gain, evidence, causes = [], 0.0, [], []
    v = vocabulary.of(report)
    sms = report.sm_count or v.default_sm_count
    for k, share in hot_kernels(report):
        latency_kind = is_latency_bound(k, v)
        if k.category in ("gemm", "conv") and k.compute_path and k.compute_path != "fma" and not latency_kind:
            continue  # a tensor-core GEMM at low occupancy is normal
        if k.blocks is not None and k.blocks < sms:
            continue  # idle SMs, not latency: grid_too_small speaks for it
        if memory_pathology(k, v):
            continue  # atomics, spills, bank conflicts or wasted sectors cause the stalls: their rules speak
        warps = k.warps_per_block
        busy = max(k.memory_throughput_pct or 0.0, k.sm_throughput_pct or 0.0)
        if k.issue_active_pct is not None:
            if (
                k.issue_active_pct >= t.latency_advice_issue_pct
                or busy >= t.busy_unit_pct
                or k.mean_ms < t.min_kernel_ms
            ):
                continue
            gain += share * (1 - busy / t.target_pct)
            evidence += [
                ev("issue slots busy", _pct(k.issue_active_pct), f">= {t.latency_advice_issue_pct:g}%", k.name),
                ev("busiest of memory / SM throughput", _pct(busy), f"~{t.target_pct:g}%", k.name),
            ]
        elif warps is not None and warps < t.enough_warps:  # a trace without metrics: the launch shape alone
            mem = (k.memory_throughput_pct or 0) / 100
            gain += share * (1 - warps / t.enough_warps) * (1 - mem)
        else:
            continue
        hits.append(k.name)
        if latency_kind and k.category in ("gemm", "conv"):
            _, tensor = busiest_tensor_pipe(k, v)
            evidence += [
                ev("DRAM throughput", _pct(k.dram_throughput_pct), "idle too: not memory-bound", k.name),
                ev("tensor pipe busy", _pct(tensor), "idles for latency, not for want of feeding", k.name),
            ]
        evidence += _occupancy_evidence(k, v, warps, t)
        causes.append(_latency_cause(k, warps, latency_kind, t))
    if not hits:
        return []
    action = " ".join(LATENCY_WORDING[c].say(report.target) for c in dict.fromkeys(causes))
    r = report.roofline
    if r is not None and r.convs and output_floor(r) and "tiles" in causes:
        # the problem's floor is its output: the stores are what a finished kernel spends its time on
        evidence.append(ev("the problem's bound", r.bound_reason))
        action += (
            f" The problem's own floor is the output write ({(r.out_bytes or 0.0) / 1e6:.3g} MB, "
            f"{(r.out_bytes or 0.0) / r.peak_bandwidth * 1e3:.3g} ms at peak bandwidth): write each output element "
            "once, from registers, in full coalesced 16-byte stores along its contiguous axis (fused epilogues such "
            "as a softmax over channels included), and nothing else to global memory."
        )
    return [
        recommendation(
            rule="latency_bound",
            title="Hide memory latency: more bytes in flight and more work per program",
            evidence=evidence,
            action=action,
            expected_gain=gain,
            gain_basis=f"time share x (1 - busiest unit / {t.target_pct:g}%): a latency-bound kernel speeds up until "
            f"its busiest unit saturates (from the launch shape alone: share x (1 - warps/{t.enough_warps:g}) x (1 - "
            "memory throughput)); "
            "measured on an H200: realized 0.14-0.89 where this gave 0.10-0.90, gather-style convs less "
            "(0.13 for 0.35)",
            kernels=hits,
            change="hide memory latency",
        )
    ]


LATENCY_WORDING = {
    "few_warps": Wording(
        "Launch 4-8 warps (128-256 threads) per program and give each program a whole row or a larger block instead "
        "of a 1-warp loop over chunks: with one warp per block an SM holds at most 32 warps and each warp stalls on "
        "every global load.",
        {
            "triton": "Launch with num_warps=4 or 8 and give each program a whole row or a larger BLOCK "
            "(triton.next_power_of_2(n_cols)) instead of a 1-warp loop over chunks: with one warp per block an SM "
            "holds at most 32 warps and each warp stalls on every global load.",
            "cuda": "Launch 128-256 threads per block and give each block a whole row (a block-wide reduction with "
            "__shfl_down_sync and shared memory) instead of a 32-thread loop over chunks: with one warp per block an "
            "SM holds at most 32 warps and each warp stalls on every global load.",
            "metal": "Dispatch threadgroups of 128-256 threads and give each a whole row (simd_sum, then threadgroup "
            "memory) instead of one SIMD-group looping over chunks.",
        },
    ),
    "registers": Wording(
        "Registers cap occupancy: shrink per-thread state (smaller tiles per program, fewer pipeline stages, "
        "recompute cheap values); check spills after the change.",
        {
            "triton": "Registers cap occupancy: shrink per-thread state (a smaller BLOCK per program, fewer "
            "num_stages, recompute cheap values) or pass maxnreg to the launch; check spills after the change.",
            "cuda": "Registers cap occupancy: shrink per-thread state (smaller tiles per thread, recompute cheap "
            "values) or set __launch_bounds__(threads, min_blocks); check spills after the change (-Xptxas -v).",
        },
    ),
    "ilp": Wording(
        "Put more bytes in flight per thread: 16-byte vector loads, several independent loads before their first "
        "use, and one pass over the data instead of several.",
        {
            "triton": "Put more bytes in flight per thread: load whole contiguous blocks (16-byte vectors), several "
            "independent tl.load calls before their first use (num_stages 2-3 in a loop), and one pass over the data "
            "instead of several.",
            "cuda": "Put more bytes in flight per thread: float4 loads, several independent loads before their first "
            "use (#pragma unroll, __ldg), and one pass over the data instead of several.",
        },
    ),
    "tiles": Wording(
        "The math pipe idles because the warps wait on scattered global loads, not because it is starved of a "
        "streamed tile: give each program more independent work (more output pixels or rows per program, wider "
        "channel chunks per product, so more bytes are in flight per SM), use async copies only for tiles that are "
        "reused, and make the stores coalesced (the output's contiguous axis along the lanes). Lower-precision "
        "operands the tolerance allows halve the bytes each load waits for.",
        {
            "triton": "The math pipe idles because the warps wait on scattered global loads, not because it is "
            "starved of a streamed tile: give each program more independent work (more output pixels or rows per "
            "program, wider channel chunks per tl.dot, so more bytes are in flight per SM), use async copies (TMA "
            "descriptors, num_stages) only for tiles that are reused, and make the stores coalesced (the output's "
            "contiguous axis along the lanes). Lower-precision operands the tolerance allows halve the bytes each "
            "load waits for.",
            "cuda": "The math pipe idles because the warps wait on scattered global loads, not because it is starved "
            "of a streamed tile: give each block more independent work (more output pixels or rows per block, wider "
            "channel chunks per MMA, so more bytes are in flight per SM), use async copies (cp.async / TMA) only for "
            "tiles that are reused, and make the stores coalesced (the output's contiguous axis along threadIdx.x). "
            "Lower-precision operands the tolerance allows halve the bytes each load waits for.",
        },
    ),
}
GRID_WORDING = Wording(
    "Split the work into at least one program per SM: smaller output tiles (32-64 rows and columns per program for a "
    "GEMM), split-K with a second reduction pass or atomics, or more rows per grid dimension. Idle SMs contribute "
    "nothing to bandwidth or FLOPs.",
    {
        "triton": "Split the work into at least one program per SM: smaller output tiles (BLOCK_M/BLOCK_N 32-64 "
        "for a GEMM), split-K with a second reduction pass or tl.atomic_add, or more rows per grid dimension. "
        "Idle SMs contribute nothing to bandwidth or FLOPs.",
        "cuda": "Launch at least one block per SM: smaller output tiles per block (32-64 rows and columns for a "
        "GEMM), split-K with a second reduction pass or atomicAdd, or more rows per gridDim. Idle SMs contribute "
        "nothing to bandwidth or FLOPs.",
    },
)


def _grid_too_small(report: ProfileReport, t: LaunchThresholds) -> list[Recommendation]:
    v = vocabulary.of(report)
    sms = report.sm_count or v.default_sm_count
    share = shares(report)
    hits = [
        k
        for k in report.device_kernels()
        if k.blocks is not None
        and k.blocks < sms
        and share.get(k.name, 0) >= RANKING.min_share
        and k.mean_ms >= t.min_kernel_ms
    ]  # under ~10 us a launch costs the same whatever the grid
    if not hits:
        return []
    gain = sum(share[k.name] * (1 - (k.blocks or sms) / sms) for k in hits)
    evidence = [
        Evidence(metric="blocks in the grid", value=k.blocks, good=f">= {sms} (one per SM)", kernel=k.name)
        for k in hits
    ]
    evidence.append(
        Evidence(metric="SMs", value=sms, good="" if report.sm_count else f"assumed ({v.default_sm_count_of})")
    )
    return [
        recommendation(
            rule="grid_too_small",
            title="Launch enough programs to use every SM",
            evidence=evidence,
            action=GRID_WORDING.say(report.target),
            expected_gain=gain,
            gain_basis="time share x (1 - blocks / SMs): time scales with the SMs in use (measured on an H200: a "
            "64-program row sum, a 32-program loop and a 64-tile GEMM realized 0.48-0.86 where this gave 0.52-0.76)",
            kernels=[k.name for k in hits],
        )
    ]


def _ncu_own_rules(report: ProfileReport, t: LaunchThresholds) -> list[Recommendation]:
    """Nsight Compute's own rule results (details page), weighted by the kernel's share of time and
    halved: ncu's estimates are per-kernel upper bounds and overlap one another."""
    share = shares(report)
    best: dict[str, tuple[float, NcuRule]] = {}
    for r in report.ncu_rules:
        if r.type != "OPT" or r.speedup_type != "global" or not r.speedup_pct or r.speedup_pct < t.ncu_min_speedup_pct:
            continue
        gain = r.speedup_pct / 100 * share.get(r.kernel, 0) * t.ncu_overlap_factor
        if gain > best.get(r.rule, (-1, None))[0]:
            best[r.rule] = (gain, r)
    out = []
    for gain, r in sorted(best.values(), key=lambda x: -x[0])[: t.ncu_top]:
        out.append(
            recommendation(
                rule=f"ncu:{r.rule}",
                title=f"Nsight Compute: {r.rule} ({r.section})",
                evidence=[
                    Evidence(
                        metric="ncu estimated speedup",
                        value=f"{r.speedup_pct:.1f}% ({r.speedup_type})",
                        kernel=r.kernel,
                    )
                ],
                action=r.description,
                expected_gain=gain,
                gain_basis=f"ncu's estimated speedup x the kernel's time share x {t.ncu_overlap_factor:g} (ncu estimates "
                "overlap); not calibrated against measured gains, so low priority, after the rules that are",
                kernels=[r.kernel],
                priority="low",
            )
        )
    return out


latency_bound = Rule(
    "latency_bound",
    _latency_bound,
    LAUNCH,
    (DEVICE_KERNELS, ISSUE_SLOTS_OR_LAUNCH_SHAPE),
    terms=(SM_COUNT, WARP_SIZE),
)
grid_too_small = Rule(
    "grid_too_small",
    _grid_too_small,
    LAUNCH,
    (DEVICE_KERNELS, LAUNCH_GRIDS),
    vendors=frozenset({"nvidia"}),
    terms=(SM_COUNT,),
)
ncu_own_rules = Rule("ncu_own_rules", _ncu_own_rules, LAUNCH, (NCU_RULE_RESULTS,), vendors=frozenset({"nvidia"}))
