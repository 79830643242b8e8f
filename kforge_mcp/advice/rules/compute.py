"""The compute thresholds the math rules share, and two of those rules: at the limit (stop), and issue slots
spent on index math rather than math. The tensor-core rules are in tensor_cores.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.kinds import (
    busiest_tensor_pipe,
)
from kforge_mcp.advice.rules.base import (
    DEVICE_KERNELS,
    ISSUE_SLOTS,
    UNIT_BUSY_OR_BOUND,
    Rule,
    Wording,
    busiest_unit,
    ev,
    hot_kernels,
    pct,
    recommendation,
)
from kforge_mcp.advice.rules.memory import MEMORY, streaming_headroom, wasted_fraction
from kforge_mcp.platforms.base import Vocabulary
from kforge_mcp.profiling.report import ProfileReport, Recommendation


@dataclass(frozen=True)
class ComputeThresholds:
    limit_unit_pct: float = 80.0  # ncu's guided analysis calls a unit above 80% of peak well utilized
    limit_unit_no_bound_pct: float = 90.0  # without a roofline the unit alone must be at ~90%
    limit_fraction: float = 0.8  # and the forward within 80% of the true bound
    saturated_fraction: float = 0.75  # a unit at >= 90% needs only ~75% of the bound (cuBLAS bf16: 97% busy, 0.795)
    near_bound_fraction: float = 0.9  # at 90% of the true bound the kernel is at its limit whatever its units say
    stop_share: float = 0.8  # stop when kernels at their limit hold >= 80% of the time
    faster_path_factor: float = 1.05  # a path under 5% faster than the FMA pipe is not worth a rewrite (a choice)
    tensor_efficiency: float = 0.4  # fraction of a single-pass path's peak a first tensor-core GEMM reaches (Triton
    # 3.6 bf16 GEMMs with 64x64 or 1-stage 128x128 tiles: 39-44% on an H200)
    # Multi-term paths (3xTF32, bf16x3) depend on the compiler's lowering: Triton 3xTF32 GEMMs reached 44-52% of the
    # 3xTF32 peak on an H100 but 19-22% on an H200 with Triton 3.6, slower than a good FMA kernel. The estimate takes
    # the low end; the basis states the range.
    multi_term_efficiency: tuple[float, float] = (0.2, 0.45)
    unknown_math_share: float = 0.5  # the FMA pipe's busy share assumed when neither pipe metrics nor FLOPs say
    worth_gain: float = 0.05  # a gain under 5% is within timing noise (bench/advice_calibration.py); where the
    # efficiency range puts the gain on both sides of it, the estimate is uncertain and its priority low
    fed_tensor_pct: float = 90.0  # a well-fed Hopper GEMM keeps its tensor pipe ~90-97% busy (cuBLAS bf16: 97%)
    conv_feed_factor: float = 0.15  # a convolution's tensor-core kernel: TMA, deeper pipelines and bigger tiles
    # realized -30% to +31% (median 0.4%) where the tensor pipe's busy fraction promised 6-68% (five steps of the H100
    # conv trajectories; realized / promised median 0.13): its pipe idles for its gathers, splits, barriers or
    # epilogue as much as for loads. Its priority is low: time it before committing to it
    shared_bound_factor: float = 0.1  # 3xTF32 GEMM waiting on shared memory: 64x64 -> 128x128 tiles, 3 stages
    # realized 0.06 where the pipe figure gave 0.76 (an H200); deeper pipelines and TMA speed up global loads, not this
    issue_bound_pct: float = 70.0  # issue slots this busy: the instruction stream is the limit
    math_share_max: float = 0.6  # ... and math (FMA or tensor) fills under this share of them: the rest is addresses
    # and loads
    issue_memory_pct: float = 60.0  # ... unless memory is this busy: then the memory rules or the limit speak


COMPUTE = ComputeThresholds()


def limiting_unit(k, v: Vocabulary, frac: float | None, t: ComputeThresholds = COMPUTE) -> tuple[str, float] | None:
    """The kernel's busiest unit and its % busy when it is saturated (and, with a roofline, the forward is
    near the true bound); None when the kernel is not at its limit."""
    unit, busy = busiest_unit(k, v, count_fma=k.category not in ("gemm", "conv"))
    if unit == "DRAM" and wasted_fraction(k, v) >= MEMORY.wasted_min:
        return None  # DRAM busy moving wasted sectors is not a limit: uncoalesced_access speaks
    saturated = busy >= t.limit_unit_no_bound_pct
    if frac is None:
        limited = saturated
    else:  # a saturated unit needs ~75% of the bound, a busy one (>= 80%) needs 80%; 90% of the bound alone is enough
        limited = (
            (saturated and frac >= t.saturated_fraction)
            or (busy >= t.limit_unit_pct and frac >= t.limit_fraction)
            or frac >= t.near_bound_fraction
        )
    return (unit, busy) if limited else None


def _at_the_limit(report: ProfileReport, t: ComputeThresholds) -> list[Recommendation]:
    r = report.roofline
    v = vocabulary.of(report)
    frac = r.fraction_of_sol if r is not None else None
    hits, evidence, covered = [], [], 0.0
    for k, share in hot_kernels(report):
        limit = limiting_unit(k, v, frac, t)
        if limit is not None:
            unit, busy = limit
            hits.append(k.name)
            covered += share
            if unit:
                evidence.append(ev(f"{unit} busy", pct(busy), f">= {t.limit_unit_pct:g}% is at the limit", k.name))
    if not hits:
        return []
    if r is not None and frac is not None:
        evidence.append(ev("fraction of the speed of light", round(frac, 3), f">= {t.limit_fraction}"))
        evidence.append(ev("bound assumes", f"{r.path} ({r.bound}-bound), T_SOL {r.sol_ms:.4g} ms"))
    evidence.append(ev("share of device time in these kernels", round(covered, 3)))
    stop = covered >= t.stop_share
    left = (1 - frac) if frac is not None else None
    if left is not None:
        evidence.append(
            ev("left before the bound (1 - fraction of SOL)", round(left, 3), "needs less work or another algorithm")
        )
    return [
        recommendation(
            rule="at_the_limit",
            title="At the limit: stop here" if stop else "These kernels are at their limit: look elsewhere",
            evidence=evidence,
            action="The busiest unit is saturated"
            + (f" and the forward runs at {frac:.0%} of the true bound" if frac is not None else "")
            + ": no change to the kernel's code moves it much further. "
            + (
                "Stop optimizing (keep this candidate), or change the algorithm or the work itself (less data "
                "moved, fewer FLOPs, a lower precision the tolerance allows)."
                if stop
                else "Spend the next round on the other kernels."
            ),
            expected_gain=0.0,
            gain_basis="a saturated unit: a change to the kernel's code is expected to save about nothing (tile and "
            "warp changes to kernels at their limit realized -1% on an H200); what is left before the bound "
            "(in the evidence) needs less data moved, fewer FLOPs or another algorithm",
            kernels=hits,
            stop=stop,
        )
    ]


at_the_limit = Rule("at_the_limit", _at_the_limit, COMPUTE, (DEVICE_KERNELS, UNIT_BUSY_OR_BOUND))


def _issue_bound(report: ProfileReport, t: ComputeThresholds) -> list[Recommendation]:
    """Issue slots full of non-math instructions (index math, scalar loads): a direct conv walking one output
    channel per program with a scalar weight load per tap. The lever is more outputs per loaded value."""
    v = vocabulary.of(report)
    hits, gain, evidence = [], 0.0, []
    products = False  # a GEMM or convolution among the kernels: more outputs per loaded value is the lever
    for k, share in hot_kernels(report):
        issue = k.issue_active_pct
        if (
            issue is None
            or issue < t.issue_bound_pct
            or max(k.memory_throughput_pct or 0, k.dram_throughput_pct or 0) >= t.issue_memory_pct
        ):
            continue
        _, tensor = busiest_tensor_pipe(k, v)
        math = max(k.fma_pipe_pct or 0.0, tensor)
        if math / issue >= t.math_share_max:
            continue
        g = 1 - math / issue
        if k.category not in ("gemm", "conv"):
            # an element-wise or reducing kernel: fewer instructions take it no further than streaming its bytes
            g = min(g, streaming_headroom((k.dram_bytes_read or 0.0) + (k.dram_bytes_write or 0.0), k, report))
        else:
            products = True
        gain += share * g
        hits.append(k.name)
        evidence += [
            ev("issue slots busy", pct(issue), f"< {t.issue_bound_pct:g}% or mostly math", k.name),
            ev("FMA / tensor pipe busy", pct(math), "most of the issue slots", k.name),
        ]
        if k.pipes.get(v.alu_pipe) is not None:
            evidence.append(ev("ALU pipe busy (integer, index math)", pct(k.pipes[v.alu_pipe]), kernel=k.name))
    if not hits:
        return []
    return [
        recommendation(
            rule="issue_bound",
            title="Spend the issue slots on math: more outputs per loaded value",
            evidence=evidence,
            action=(ISSUE_WORDING if products else ELEMENT_ISSUE_WORDING).say(report.target),
            expected_gain=gain,
            gain_basis="time share x (1 - math pipe busy / issue slots busy): the non-math instructions go away "
            "(measured on an H200: a direct conv turned implicit GEMM realized 0.88 where this gave 0.61); for a "
            "kernel that is no GEMM or convolution, no more than its time over streaming its DRAM bytes at "
            f"{MEMORY.dram_ceil_pct:g}% of peak bandwidth",
            kernels=hits,
        )
    ]


ISSUE_WORDING = Wording(
    "The warps issue every cycle, but mostly index math and loads, not FMAs. Compute more outputs per program from "
    "the same loads: a block of output pixels x all output channels as one matrix product over the input-channel x "
    "tap axis (implicit GEMM), weights loaded as a tile rather than a scalar per tap, and index arithmetic hoisted "
    "out of the inner loop.",
    {
        "triton": "The warps issue every cycle, but mostly index math and loads, not FMAs. Compute more outputs per "
        "program from the same loads: a block of output pixels x all output channels as one tl.dot over the "
        "input-channel x tap axis (implicit GEMM), weights loaded as a tile rather than a scalar per tap, and index "
        "arithmetic hoisted out of the inner loop.",
    },
)
ELEMENT_ISSUE_WORDING = Wording(
    "The warps issue every cycle, but mostly index math, comparisons and loads, not the arithmetic the kernel is "
    "for. Spend fewer instructions an element: compute each row's or tile's indices once, not per element (shapes "
    "as compile-time constants turn divisions and modulos into shifts, a loop nest replaces them), load contiguous "
    "16-byte vectors, and give each thread more elements of the same row.",
    {
        "triton": "The warps issue every cycle, but mostly index math, comparisons and loads, not the arithmetic the "
        "kernel is for. Spend fewer instructions an element: compute each row's or tile's offsets once as a "
        "tl.arange block, not per element (sizes as tl.constexpr turn // and % into shifts; a 2-D block [rows, "
        "contiguous axis] replaces them), load along the contiguous axis so the compiler emits 16-byte vector "
        "loads, and give each program more elements of the same rows.",
    },
)
issue_bound = Rule("issue_bound", _issue_bound, COMPUTE, (DEVICE_KERNELS, ISSUE_SLOTS))
