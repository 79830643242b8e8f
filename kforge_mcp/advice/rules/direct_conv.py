"""A small convolution: when an output pixel takes few multiply-adds (input channels x taps) into few output channels,
an implicit GEMM pays more to shape its operands for the MMAs (gathered tiles padded to the MMA's K and N, the fp32
split, shared-memory staging) than the MMAs save. The same convolution done directly on the FMA units in exact fp32,
each thread holding a few output pixels x every output channel, reads the input as it lies and needs no split. The
rule speaks to such a convolution's kernels on the tensor cores, and to those on the FMA units short of what a direct
one reaches (a plain fp32 kernel, which the tensor cores' advice would otherwise send to an implicit GEMM first).

Drawn from Conv3d_GroupNorm_Mean on an H200 (81 multiply-adds a pixel into 24 channels,
bench/results/direct-conv/h200.md): its best 3xTF32 kernel, after seven steps of advice, ran at 11% of 3xTF32's peak
(0.553 ms against 0.062 ms), and a first direct FMA kernel at 40% of the FMA peak (0.371 ms against 0.147 ms). Those
two fractions price the rule and the tensor cores' advice for these convolutions (tensor_cores.py: at 11% of 3xTF32's
peak on any path, since the time went to shaping operands), so that neither sends a kernel back where the other took
it from. Held out (bench/results/direct-conv/h200-held-out.md): on a wider volume the change realized 45% for 48%
expected, and direct kernels for Conv3d_Min_Softmax and Conv3d_Scaling_Tanh_Multiply_Sigmoid reached 41% and 42% of
the FMA peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.kinds import is_fma_gemm, is_tensor_gemm
from kforge_mcp.advice.rules.base import DEVICE_KERNELS, Rule, Wording, ev, hot_kernels, recommendation
from kforge_mcp.core.schemas import Convolution
from kforge_mcp.judge.roofline import lookup_peaks
from kforge_mcp.judge.roofline.conv import depth
from kforge_mcp.platforms.base import Vocabulary
from kforge_mcp.profiling.report import KernelProfile, ProfileReport, Recommendation


@dataclass(frozen=True)
class DirectConvThresholds:
    max_depth: int = 128  # an output pixel's multiply-adds (C_in / groups x taps met) up to this
    max_channels: int = 32  # output channels a group up to this: one MMA N tile or less
    fma_efficiency: float = 0.40  # a first direct FMA convolution's fraction of the FMA peak (measured: 40%)
    tensor_efficiency: float = 0.11  # the best tensor-core kernel's fraction of its path's peak (measured: 11%)
    fma_kernel_fraction: float = 0.20  # an FMA kernel under this fraction of the FMA peak is not a direct one yet
    staged_wavefronts: float = 0.5  # ... when it reads its operands from shared memory: this many wavefronts a warp's
    # multiply-add (tl.dot on the FMA units, an implicit GEMM: 2.4-20 on an H200) against a direct kernel's few
    # (0-0.2: weights broadcast through shared memory at most); a direct one is slow for other reasons


DIRECT_CONV = DirectConvThresholds()


def is_small_conv(c: Convolution, t: DirectConvThresholds = DIRECT_CONV) -> bool:
    """Few multiply-adds a pixel into few output channels: the MMAs' operand shaping outweighs what they save."""
    return depth(c) <= t.max_depth and c.c_out / c.groups <= t.max_channels


def small_convs(report: ProfileReport, t: DirectConvThresholds = DIRECT_CONV) -> list[Convolution]:
    """The problem's convolutions, when all of them are small; none otherwise."""
    r = report.roofline
    convs = list(r.convs) if r is not None and r.convs else []
    return convs if convs and all(is_small_conv(c, t) for c in convs) else []


DIRECT_WORDING = Wording(
    "{situation} Compute it directly on the FMA units in exact fp32: each thread holds a few output pixels x every "
    "output channel in registers; per tap, load the input at the pixels' offsets plus the tap's constant offset (the "
    "input as it lies, no re-layout) and the tap's weights of every channel (laid out [taps, channels] once per "
    "weight version), and accumulate their outer product.{phases} Loop over the taps with only the innermost axis "
    "unrolled (unrolling every tap overflows the instruction cache), and size the block so the accumulators stay under "
    "~170 registers. Keep what the kernel does with the accumulators after the taps (its epilogue) as it is.",
    {
        "triton": "{situation} Compute it directly on the FMA units in exact fp32: acc = tl.zeros((CHANNELS, BLOCK_P), "
        "tl.float32) for BLOCK_P output pixels of one sample; per tap, xv = tl.load(x + pixel_offsets + tap_offset, "
        "mask=...) (the input as it lies, no re-layout) and w = tl.load(w_taps + tap * CHANNELS + tl.arange(0, "
        "CHANNELS)) (the weight laid out [taps, channels] once per weight version), acc += w[:, None] * xv[None, :]."
        "{phases} Loop over {loop} with range() and unroll only {inner} with tl.static_range (unrolling every tap "
        "overflows the instruction cache); BLOCK_P = 128 with num_warps=1 (4 pixels x every channel a thread, under "
        "~170 registers). Keep what the kernel does with acc after the taps (its epilogue) as it is.",
    },
)


def stages_operands(
    kernels: list[tuple[KernelProfile, float]], conv_flops: float, v: Vocabulary, t: DirectConvThresholds = DIRECT_CONV
) -> bool:
    """The FMA kernels read their operands from shared memory as an implicit GEMM's tl.dot does (unknown: taken as
    so); a direct convolution reads its input and weights from global memory into registers."""
    if any(k.shared_wavefronts is None for k, _ in kernels) or not v.warp_size or conv_flops <= 0:
        return True
    warp_madds = conv_flops / 2 / v.warp_size
    return sum(k.shared_wavefronts or 0.0 for k, _ in kernels) / warp_madds >= t.staged_wavefronts


def tap_loops(c: Convolution) -> dict[str, str]:
    """The wording's tap loops for this convolution: the axes looped over and the one unrolled, and for a strided
    transposed convolution its output phases, each meeting only its own taps."""
    axes = ["kd", "kh", "kw"][3 - len(c.kernel) :]
    loop = "(channel, " + ", ".join(axes[:-1]) + ")" if len(axes) > 1 else "the channels"
    phases = ""
    if c.transposed and any(s > 1 for s in c.stride):
        s = c.stride[0] if len(set(c.stride)) == 1 else "x".join(map(str, c.stride))
        phases = (
            f" It is transposed with stride {s}: take the outputs one phase at a time (o = stride j + p along each "
            "axis, p < stride), and give each phase only the taps that meet it (k = r + stride t with r = (p + "
            "padding) mod stride, reading input j + (p + padding) // stride - t), so that no tap is loaded to be "
            "masked away."
        )
    return {"loop": loop, "inner": axes[-1], "phases": phases}


def _direct_conv(report: ProfileReport, t: DirectConvThresholds) -> list[Recommendation]:
    convs = small_convs(report, t)
    r = report.roofline
    if not convs or r is None:
        return []
    fma = lookup_peaks(r.device)[0].flops.get("fp32")
    total_ms = r.measured_ms or report.device_ms_per_forward or 0.0
    conv_flops = sum(c.flops for c in convs)
    # its kernels on the tensor cores, or on the FMA units short of what a direct convolution reaches
    kernels = [(k, share) for k, share in hot_kernels(report) if is_tensor_gemm(k) or is_fma_gemm(k)]
    if not fma or total_ms <= 0 or not kernels:
        return []
    direct_ms = conv_flops / (fma * t.fma_efficiency) * 1e3
    conv_share = sum(share for _, share in kernels)
    now_ms = conv_share * total_ms
    gain = conv_share * (1 - direct_ms / now_ms)
    if gain <= 0:
        return []
    c = max(convs, key=lambda c: c.flops)
    madds = round(depth(c))
    channels = c.c_out // c.groups
    small = f"The convolution is small ({madds} multiply-adds an output pixel into {channels} output channels)"
    reached = conv_flops / (fma * now_ms * 1e-3)
    if any(is_tensor_gemm(k) for k, _ in kernels):
        situation = f"{small} and its tensor-core kernel spends more shaping operands for the MMAs than they save."
    elif reached < t.fma_kernel_fraction and stages_operands(kernels, conv_flops, vocabulary.of(report), t):
        situation = (
            f"{small} and runs on the FMA units at {reached:.0%} of their peak, where a direct one reaches "
            f"{t.fma_efficiency:.0%}."
        )
    else:
        return []  # a direct kernel already: near its rate, or slow for another reason that other rules name
    return [
        recommendation(
            rule="direct_conv",
            title="Compute the small convolution directly on the FMA units",
            evidence=[
                ev("multiply-adds an output pixel takes (C_in x taps met)", madds, f"<= {t.max_depth}"),
                ev("output channels a group", channels, f"<= {t.max_channels}"),
                ev("the convolution's kernels' time", f"{now_ms:.4g} ms", "", ", ".join(k.name for k, _ in kernels)),
                ev(
                    "direct FMA estimate",
                    f"{direct_ms:.4g} ms",
                    f"{conv_flops / 1e9:.4g} GFLOP at {t.fma_efficiency:.0%}"
                    f" of the FMA peak ({fma / 1e12:.4g} TFLOP/s)",
                ),
            ],
            action=DIRECT_WORDING.say(report.target).format(situation=situation, **tap_loops(c)),
            expected_gain=gain,
            gain_basis=f"share x (1 - conv FLOPs / (FMA peak x {t.fma_efficiency:g}) / the convolution's kernels' "
            f"time): a first direct FMA convolution reached {t.fma_efficiency:.0%} of the FMA peak (Conv3d_GroupNorm_"
            "Mean on an H200, the instance this rule was drawn from; held out, two other problems' 41% and 42%)",
            kernels=[k.name for k, _ in kernels],
            change="direct convolution on the FMA units",
        )
    ]


direct_conv = Rule("direct_conv", _direct_conv, DIRECT_CONV, (DEVICE_KERNELS,))
