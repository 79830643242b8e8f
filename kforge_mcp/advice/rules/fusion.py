"""Fusing a forward's launches: memory-bound kernels into one, the kernels after a compute-bound GEMM or
convolution into its epilogue (a convolution's statistics from its accumulator, with the output written once or
recomputed, whichever the figures say is cheaper); never the kernels before it into its main loop.
"""

from __future__ import annotations

import math

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.kinds import busiest_tensor_pipe
from kforge_mcp.advice.rules.base import DEVICE_KERNELS, Rule, recommendation
from kforge_mcp.advice.rules.launch import LAUNCH, LaunchThresholds
from kforge_mcp.judge.roofline import dtype_bytes
from kforge_mcp.platforms.base import Vocabulary
from kforge_mcp.platforms.formats import MEMCPY_METRIC
from kforge_mcp.profiling.report import Evidence, ProfileReport, Recommendation


def busy_compute(k, v: Vocabulary, t: LaunchThresholds = LAUNCH) -> bool:
    pipe = max(busiest_tensor_pipe(k, v)[1], k.fma_pipe_pct or 0.0)
    return k.category in ("gemm", "conv") and pipe >= t.busy_compute_pct


def _fuse_memory_bound(times: dict[str, float], total: float) -> tuple[float, str, str]:
    """Memory-bound kernels: the fused kernel reads the inputs and writes the output once, about as long as the
    longest of them (measured on an H200: three element-wise kernels and a three-kernel softmax realized
    0.50-0.66 where this gave 0.50-0.67)."""
    longest = max(times.values())
    gain = 1 - longest / total if total > 0 else 0.0
    basis = (
        f"a fused memory-bound kernel takes about as long as the longest current kernel: "
        f"1 - {longest:.4g} / {total:.4g} ms per forward (host launch time saved comes on top)"
    )
    action = (
        "Write one kernel for the whole forward: load each input once, keep intermediates in registers "
        "(e.g. x + bias -> gelu -> * scale, or a row's max, sum of exp and normalized output from one load "
        "with the row held in a block), and store only the final output. Each extra launch costs a launch "
        "latency plus a full write and re-read of the intermediate tensor in global memory."
    )
    return gain, basis, action


def _fuse_launches(report: ProfileReport, t: LaunchThresholds) -> list[Recommendation]:
    v = vocabulary.of(report)
    ks = [k for k in report.device_kernels() if MEMCPY_METRIC not in k.metrics]
    per_fwd = report.launches_per_forward or 0
    if len(ks) < t.min_launches or per_fwd < t.min_launches:
        return []
    fwd = report.forwards or 1
    times = {k.name: k.device_ms / fwd for k in ks}
    total = sum(times.values())
    busy = next((k for k in ks if busy_compute(k, v, t)), None)
    # a convolution's kernel anchors the fusion whether or not its pipe is busy: what follows it reads its output back
    busy = busy or next((k for k in ks if k.category == "conv"), None)
    evidence = [
        Evidence(metric="launches per forward", value=round(per_fwd, 2), good="1 (one fused kernel)"),
        Evidence(metric="distinct kernels", value=len(ks), good="1"),
        Evidence(metric="device ms per forward", value=round(total, 5)),
    ]
    evidence += [Evidence(metric="mean ms per launch", value=round(k.mean_ms, 5), kernel=k.name) for k in ks[:6]]
    if busy is None:
        gain, basis, action = _fuse_memory_bound(times, total)
        fold = ks
    else:
        # a compute-bound GEMM/conv: only the kernels after it fold in, as its epilogue; work before it would run
        # again for every tile in its main loop, on a pipe that is already busy (measured on an H200: folding a
        # bf16 operand split into a bf16x3 GEMM whose tensor pipe was 66% busy made it 35% slower; a bias + ReLU
        # epilogue saved 6%, its own share of the time)
        order = [k.name for k in ks]
        fold = [k for k in ks if order.index(k.name) > order.index(busy.name)]
        before = [k for k in ks if order.index(k.name) < order.index(busy.name)]
        gain = sum(times[k.name] for k in fold) / total if total > 0 else 0.0
        basis = (
            f"{busy.name[:40]} is compute-bound: the kernels after it fold into its epilogue and save their own "
            f"time ({gain:.3f} of the forward); the kernels before it are not counted"
        )
        pipe = max(busiest_tensor_pipe(busy, v)[1], busy.fma_pipe_pct or 0.0)
        evidence.append(Evidence(metric="busiest math pipe of the GEMM", value=f"{pipe:.0f}%", kernel=busy.name))
        reductions = [k for k in fold if k.category in ("reduction", "other")]
        action = (
            statistics_in_epilogue(report, busy, times[busy.name])
            if busy.category == "conv" and reductions
            else f"Fold the element-wise kernels that follow {busy.name[:40]} into its epilogue (apply them to the "
            "accumulator in registers before the store). "
        )
        if busy.category == "conv" and reductions and (busy.atomic_instructions or 0) > 0:
            gain, basis = _left_after_epilogue_statistics(busy.name, fold, times, total)
        elif busy.category == "conv" and reductions:
            gain, basis = _statistics_priced(report, busy.name, fold, times, total, t)
        if before:
            action += (
                f"Do not fold the kernels before it ({', '.join(k.name[:30] for k in before)}) into its main loop: "
                "their work would run again for every tile that loads the data, on a math pipe already "
                f"{pipe:.0f}% busy. Keep them as they are, or do them once per weight version when they only "
                "touch weights."
            )
        if not fold:
            return []
    return [
        recommendation(
            rule="fuse_launches",
            title=f"Fuse the {len(ks)} kernels of each forward into one"
            if busy is None
            else f"Fold the {len(fold)} kernel(s) after the {'convolution' if busy.category == 'conv' else 'GEMM'} "
            "into its epilogue",
            evidence=evidence,
            action=action,
            expected_gain=gain,
            gain_basis=basis,
            kernels=[k.name for k in fold] if busy is not None else [k.name for k in ks],
            change="fuse the forward's kernels",
        )
    ]


def _statistics_priced(
    report: ProfileReport, conv: str, fold, times: dict[str, float], total: float, t: LaunchThresholds
) -> tuple[float, str]:
    """What taking the statistics into the conv's epilogue saves: the kernels after it, less the pass that must
    still read and write the output to normalize it (at peak bandwidth) and what the statistics add to the conv
    (priced so on the H100 conv trajectories: 39% for a realized 39%, 29% for 28%, 3% for -5%)."""
    r = report.roofline
    left = sum(times[k.name] for k in fold)
    pass_ms = 2 * (r.out_bytes or 0.0) / r.peak_bandwidth * 1e3 if r is not None and r.peak_bandwidth else 0.0
    grows = t.epilogue_statistics_cost * times[conv]
    gain = max(0.0, left - pass_ms - grows) / total if total > 0 else 0.0
    return gain, (
        f"the kernels after {conv[:40]} ({left:.4g} ms a forward) less the pass that still reads and writes the "
        f"output to normalize it ({pass_ms:.3g} ms at peak bandwidth; none where the output is the reduction) and "
        f"the statistics' cost in the conv's epilogue ({t.epilogue_statistics_cost:g} of its {times[conv]:.4g} ms, "
        "measured on the H100 conv trajectories)"
    )


def _left_after_epilogue_statistics(conv: str, fold, times: dict[str, float], total: float) -> tuple[float, str]:
    """The statistics come from the conv's epilogue already (its atomics): what is left after it is the pass that
    needs them all, which folds only by recomputing the conv there (a conv whose epilogue took a softmax's sums
    went 3% slower for the 35% it was promised; the normalize pass left was 19%)."""
    left = sum(times[k.name] for k in fold)
    gain = max(0.0, left - times[conv]) / total if total > 0 else 0.0
    return gain, (
        f"{conv[:40]} reduces in its epilogue already (atomics): the {left:.4g} ms after it fold in only by "
        f"recomputing the conv ({times[conv]:.4g} ms) in their place"
    )


def statistics_in_epilogue(report: ProfileReport, conv, conv_ms: float) -> str:
    """The kernels after a convolution reduce its output (a norm's statistics, a softmax's sums, a mean): the
    output need not make the round trip. Their statistics come from the conv's epilogue, and what needs the output
    again either reads it once (written by the conv) or recomputes the conv, whichever the figures say is cheaper."""
    r = report.roofline
    out = (r.out_bytes or 0.0) if r is not None else 0.0
    size = dtype_bytes(r.dtype) if r is not None else 4
    conv_bytes = max((c.batch * c.c_out * math.prod(c.out_spatial) * size for c in r.convs), default=0.0) if r else 0.0
    text = (
        f"Compute what the kernels after {conv.name[:40]} reduce its output to in the conv's epilogue: per tile, "
        "reduce the accumulator in registers (a norm's per-(sample, group) sum and sum of squares, a softmax's "
        "per-row max and sum of exponentials, a mean's sum) and add the partial results into a small buffer with "
        "atomics, so no kernel reads the conv output back to find them. "
    )
    if conv_bytes and r is not None:
        round_trip = 2 * conv_bytes / r.peak_bandwidth * 1e3
        text += (
            f"Where the output must then be normalized, either write the conv output once and normalize it in one "
            f"pass, or recompute the convolution in that pass and never write it: writing and reading back its "
            f"{conv_bytes / 1e6:.4g} MB costs at least {round_trip:.3g} ms at peak bandwidth, recomputing it about "
            f"this conv kernel's {conv_ms:.3g} ms a forward; take the cheaper. "
        )
    if out and conv_bytes and out < 0.25 * conv_bytes:
        text += "Where only the reduction is the output, the conv output need not exist at all. "
    return text


fuse_launches = Rule("fuse_launches", _fuse_launches, LAUNCH, (DEVICE_KERNELS,))
