"""Operands split inside the K loop: a tensor-core kernel on a multi-term path (bf16x3, 3xTF32) that makes each fp32
tile's parts per K step spends the conversion pipe on every step and sends the split tiles through registers before
the MMAs read them. Split once instead: the weight's parts once per weight version, the input's in the pass that lays
it out (or one pass of its own), and the loop only loads parts and multiplies them.

TMA alone does not relieve it: on the H100 two bf16x3 convolutions that took TMA but kept the split in the loop kept
their tensor pipe 14-26% busy (realized 9-10% of the 66-75% feed_tensor_pipe promised), one that split in its
re-layout pass 65%. Bf16x3 GEMMs that took TMA and the split once in one step went from 35% to 93-97% (an H200). So
a kernel not yet fed by TMA is feed_tensor_pipe's, whose action then says to split once too; one already fed is
split_once's.
"""

from __future__ import annotations

from dataclasses import dataclass

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.kinds import busiest_tensor_pipe, is_gather_fed_conv, is_tensor_gemm, multi_term
from kforge_mcp.advice.rules.base import (
    CONVERT_PIPE,
    DEVICE_KERNELS,
    Rule,
    Wording,
    ev,
    hot_kernels,
    pct,
    recommendation,
)
from kforge_mcp.core.schemas import Roofline
from kforge_mcp.judge.roofline import input_pass_bytes, lookup_peaks
from kforge_mcp.platforms.base import Vocabulary
from kforge_mcp.profiling.report import KernelProfile, ProfileReport, Recommendation


@dataclass(frozen=True)
class SplitThresholds:
    convert_min_pct: float = 10.0  # the conversion pipe this busy in a tensor-core kernel is the split's work
    convert_vs_tensor: float = 0.5  # ... and at least half as busy as its tensor pipe (a kernel that splits once
    # outside its loop: 0% on the H100; three that split inside: 20-32% against a tensor pipe of 10-26%)
    copy_fed_pct: float = 0.1  # the copy pipe above this: TMA loads its operands (the step-3 convolutions of the
    # H100 trajectories: 0.43-0.94%; kernels with no TMA read 0.0)


SPLIT = SplitThresholds()

SPLIT_WORDING = Wording(
    "The kernel splits its fp32 operands into their {path} parts inside the K loop: every step converts both tiles "
    "on the conversion pipe and moves the parts through registers before the MMAs read them. Split once, outside "
    "the loop: the weight's parts once per weight version (cached on the parameter's version), the input's in the "
    "pass that already lays it out (for a convolution, the channels-last re-layout writes two planes, the high and "
    "the low part) or in one pass of its own. The loop then only loads the parts (TMA straight into shared memory) "
    "and issues the MMAs.",
    {
        "triton": "The kernel splits its fp32 operands into their {path} parts inside the K loop: every step "
        "converts both tiles on the conversion pipe and moves the parts through registers before tl.dot reads them. "
        "Split once, outside the loop: the weight's parts once per weight version (cached on the parameter's "
        "_version), the input's in the pass that already lays it out (for a convolution, the channels-last "
        "re-layout kernel writes two tensors, hi = x.to(tl.bfloat16) and lo = (x - hi.to(tl.float32)).to("
        "tl.bfloat16), the same bytes as the fp32 input) or in one Triton pass of its own. Then load a_hi, a_lo, "
        "w_hi, w_lo tiles with TMA descriptors (TensorDescriptor over each part) and issue the three tl.dot calls "
        "(lo_a hi_b, hi_a lo_b, hi_a hi_b) on them directly: no conversion and no register round trip in the loop.",
    },
)
SPLIT_WITH_FEED = (
    " The kernel splits its operands in the K loop (the conversion pipe is busy next to the tensor pipe): split them "
    "once outside it, the weight's parts once per weight version and the input's in one pass, and load the parts "
    "themselves by TMA, so no tile makes a round trip through registers (bf16x3 GEMMs that did both in one step "
    "kept their tensor pipe 93-97% busy)."
)
TF32_PARTS = (
    " For 3xTF32 the parts are fp32: big = x with its low 13 mantissa bits cleared and small = x - big, each "
    "multiplied with input_precision='tf32'; that doubles the operand bytes, so where the tolerance allows bf16x3, "
    "its two bf16 parts take the input's own bytes."
)


def convert_busy(k: KernelProfile, v: Vocabulary) -> float | None:
    """How busy the kernel's conversion pipe was (% of its peak), or None where the profile does not say."""
    return k.metrics.get(v.convert_metric) if v.convert_metric else None


def epilogue_busy(k: KernelProfile, v: Vocabulary, roof: Roofline | None) -> float:
    """How busy the forward's special functions (exp, log, reciprocals: a fused epilogue's tanh or mish) keep the
    conversion pipe over this kernel's time, at the pipe's rate (% of it; 0 where unknown). Counted as if the
    kernel computed them all: the split's share left over is a low estimate."""
    ms = k.mean_ms * (k.launches_per_forward or 1.0)
    if roof is None or not roof.special_functions or not v.special_function_lanes or ms <= 0:
        return 0.0
    peaks, _ = lookup_peaks(roof.device)
    rate = peaks.flops["fp32"] / 2 * v.special_function_lanes  # FMA lanes' results a second x the pipe's share
    return 100 * roof.special_functions / rate / (ms / 1e3)


def split_busy(k: KernelProfile, v: Vocabulary, roof: Roofline | None) -> float | None:
    """The conversion pipe's busy share left to the operands' split: its busy share less the epilogue's."""
    convert = convert_busy(k, v)
    return None if convert is None else max(0.0, convert - epilogue_busy(k, v, roof))


def splits_in_loop(
    k: KernelProfile, v: Vocabulary, roof: Roofline | None, conv_problem: bool, t: SplitThresholds = SPLIT
) -> bool:
    """A tensor-core kernel on a multi-term path whose conversion pipe, less its epilogue's special functions, is
    busy next to its tensor pipe; a convolution still gathering its operands is gather_fed_conv's, whose re-layout
    pass is where the split goes."""
    path = roof.path if roof is not None else None
    if not multi_term(path) or not is_tensor_gemm(k) or is_gather_fed_conv(k, v, conv_problem):
        return False
    split = split_busy(k, v, roof)
    _, tensor = busiest_tensor_pipe(k, v)
    return split is not None and split >= t.convert_min_pct and split >= t.convert_vs_tensor * tensor


def fed_by_copy(k: KernelProfile, v: Vocabulary, t: SplitThresholds = SPLIT) -> bool:
    """TMA (the copy pipe) already loads the kernel's operands."""
    return bool(v.copy_pipe) and k.pipes.get(v.copy_pipe, 0.0) > t.copy_fed_pct


def _split_once(report: ProfileReport, t: SplitThresholds) -> list[Recommendation]:
    r = report.roofline
    if r is None:
        return []
    v = vocabulary.of(report)
    hits, gain, evidence = [], 0.0, []
    for k, share in hot_kernels(report):
        if not splits_in_loop(k, v, r, bool(r.convs), t) or not fed_by_copy(k, v, t):
            continue  # not yet fed by TMA: feed_tensor_pipe's change, with the split made once
        split = split_busy(k, v, r) or 0.0
        _, tensor = busiest_tensor_pipe(k, v)
        gain += share * split / 100
        hits.append(k.name)
        evidence += [
            ev("conversion pipe busy", pct(convert_busy(k, v)), "the epilogue's special functions alone", k.name),
            ev("of it, the epilogue's special functions (at the pipe's rate)", pct(epilogue_busy(k, v, r)), "", k.name),
            ev("tensor pipe busy", pct(tensor), kernel=k.name),
            ev(f"{v.copy_pipe} pipe busy", pct(k.pipes.get(v.copy_pipe)), "operands already arrive by TMA", k.name),
        ]
    if not hits:
        return []
    # the input's parts cost one pass where no re-layout pass writes them yet: charged, so the estimate stays low
    c = max(r.convs, key=lambda x: x.flops) if r.convs else None
    pass_ms = 0.0
    if c is not None and r.peak_bandwidth:
        pass_ms = input_pass_bytes(c, r.dtype) / r.peak_bandwidth * 1e3
        total_ms = r.measured_ms or report.device_ms_per_forward or 0.0
        if total_ms > 0:
            gain -= pass_ms / total_ms
    evidence.append(ev("bound path", r.path, "a multi-term path: its parts can be made once"))
    action = SPLIT_WORDING.say(report.target).format(path=r.path)
    if "tf32" in r.path:
        action += TF32_PARTS
    pass_note = (
        f", less one pass over the input to write its parts ({pass_ms:.3f} ms at peak bandwidth) where no re-layout "
        "pass writes them yet"
        if pass_ms
        else ""
    )
    return [
        recommendation(
            rule="split_once",
            title=f"Split the operands into their {r.path} parts once, outside the K loop",
            evidence=evidence,
            action=action,
            expected_gain=gain,
            gain_basis=f"share x the conversion pipe's busy fraction less what the forward's special functions "
            f"(exp, log, reciprocals: {r.special_functions:.3g} a forward) keep it busy{pass_note}: the conversions leave the loop (a low "
            "estimate: the register round trip before the MMAs goes too; measured on the H100: bf16x3 convolutions "
            "that split in the loop kept their tensor pipe 14-26% busy, one that split in its re-layout pass 65%)",
            kernels=hits,
            change="split the operands once",
        )
    ]


split_once = Rule("split_once", _split_once, SPLIT, (DEVICE_KERNELS,), terms=(CONVERT_PIPE,))
