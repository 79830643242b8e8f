"""Convolutions fed by gathers: an implicit GEMM whose operand tiles are loaded on computed offsets (a channel and a
tap per K index, masked at the borders) is a regime of its own. Its tensor pipe idles because the warps wait on the
gathered loads, not because loads and MMAs fail to overlap: TMA, 128x256 tiles and BLOCK_K 64 (feed_tensor_pipe's
levers for a GEMM) do not apply to a K of 16-32 taps x channels read through masks. Its levers make the operand
tile a plain block again: the input laid out channels-last (and zero-padded) once per forward, the K loop walked tap
by tap with channels inside, the loads of the next step in flight, and a stride-2 transposed convolution split by
output parity so no MMA multiplies a masked zero.
"""

from __future__ import annotations

from math import prod

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.kinds import KINDS, KindThresholds, busiest_tensor_pipe, is_gather_fed_conv, multi_term
from kforge_mcp.advice.rules.base import DEVICE_KERNELS, Rule, Wording, ev, hot_kernels, pct, recommendation
from kforge_mcp.advice.rules.tensor_cores import efficiency_range
from kforge_mcp.core.schemas import Convolution
from kforge_mcp.judge.roofline import input_pass_bytes
from kforge_mcp.judge.roofline.conv import output_phases, taps_met
from kforge_mcp.profiling.report import ProfileReport, Recommendation


def _parity(c: Convolution) -> str:
    """What a K loop over every tap wastes on a strided transposed convolution, from the taps each output parity
    class meets (judge/roofline/conv.py's output_phases)."""
    if not c.transposed or all(s == 1 for s in c.stride):
        return ""
    met = taps_met(c)  # taps an output pixel meets, on average
    taps = prod(c.kernel)
    classes = prod(len(dim) for dim in output_phases(c))
    return (
        f" The stride {'x'.join(map(str, c.stride))} transposed convolution gives an output pixel {met:.2g} of its "
        f"{taps} taps on average: a K loop over all {taps} for every output pixel multiplies {1 - met / taps:.0%} "
        f"masked zeros. Unless the kernel does already, split the output by parity ({classes} classes, one program "
        "axis or one launch each): each class is a dense convolution over the taps it meets, with no mask inside the "
        "K loop."
    )


GATHER_WORDING = Wording(
    "The tensor pipe waits on the convolution's gathered operands (computed offsets, a channel and a tap per K "
    "index, masked at the borders), not on a pipeline that fails to overlap: make each K step's input tile a plain "
    "block. (1) Lay the input out channels-last once per forward, zero-padded so that no tap reads outside it, in one "
    "pass ({relayout}); the weight as [taps, C_in, C_out] once per weight version. (2) Walk K tap by tap, channels "
    "inside: the tap's spatial offset is added once per tap, and a [pixels, channels] tile is rows of "
    "contiguous floats (16-byte vector loads), with no border mask thanks to the padding. "
    "(3) Keep the next steps' loads in flight: 3-4 pipeline stages, 32-64 channels a K step.",
    {
        "triton": "The tensor pipe waits on the convolution's gathered operands (computed offsets, a channel and a "
        "tap per K index, masked at the borders), not on a pipeline that fails to overlap: make each K step's input "
        "tile a plain block. (1) Lay the input out channels-last once per forward, zero-padded so that no tap reads "
        "outside it, in one pass ({relayout}); the weight as [taps, C_in, C_out] once per weight version (cached on "
        "the parameter's _version). (2) Walk K tap by tap, channels inside (for each tap: for c0 in tl.range(0, "
        "C_in, BLOCK_K, num_stages=3)): the tap's spatial offset is added once per tap, and the [BLOCK_M pixels, "
        "BLOCK_K channels] tile is BLOCK_M rows of BLOCK_K contiguous floats, loaded with the channel axis fastest "
        "(offsets[:, None] * C_in + channels[None, :]) so the compiler emits 16-byte vector loads and needs no "
        "border mask. (3) Keep the next steps' loads in flight: num_stages 3-4 on that tl.range, BLOCK_K 32-64, "
        "num_warps 4-8.",
    },
)


def _gather_fed_conv(report: ProfileReport, t: KindThresholds) -> list[Recommendation]:
    r = report.roofline
    c = max(r.convs, key=lambda x: x.flops) if r is not None and r.convs else None
    if r is None or c is None:
        return []
    v = vocabulary.of(report)
    hits, gain, evidence = [], 0.0, []
    relayout_bytes = input_pass_bytes(c, r.dtype)  # read it, write it channels-last
    relayout_ms = relayout_bytes / r.peak_bandwidth * 1e3
    effs = set()
    peaks = {p.path: p.peak_flops for p in r.paths} | {r.path: r.peak_flops}
    for k, share in hot_kernels(report):
        if not is_gather_fed_conv(k, v, True, t):
            continue
        # the kernel's format where the profile names one (it may name only the instruction, e.g. wgmma), else the
        # bound's path, which the advice asked for
        name = k.compute_path if k.compute_path in peaks else r.path
        peak = peaks[name]
        eff = efficiency_range(name)[0]
        effs.add((name, eff))
        kernel_ms = k.mean_ms * (k.launches_per_forward or 1.0)
        target_ms = sum(x.flops for x in r.convs) / (peak * eff) * 1e3 + relayout_ms
        if kernel_ms <= 0 or target_ms >= kernel_ms:
            continue
        gain += share * (1 - target_ms / kernel_ms)
        hits.append(k.name)
        pipe, busy = busiest_tensor_pipe(k, v)
        s = k.top_stalls[0]
        evidence += [
            ev(f"{pipe or 'tensor'} pipe busy", pct(busy), f">= {t.gather_tensor_pct:g}%", k.name),
            ev(f"top stall: {s.reason}", s.cycles_per_issue, "the warps wait on the gathered loads", k.name),
            ev(
                f"{v.copy_pipe} pipe busy",
                pct(k.pipes.get(v.copy_pipe, 0.0)),
                "the operands are gathered, not copied",
                k.name,
            ),
        ]
        if k.global_load_sectors_per_request is not None:
            evidence.append(ev("sectors per load request", round(k.global_load_sectors_per_request, 1), kernel=k.name))
    if not hits:
        return []
    evidence.append(ev("convolution", f"{c.op}: C_in {c.c_in}, kernel {c.kernel}, stride {c.stride}"))
    relayout = f"{relayout_bytes / 1e6:.0f} MB moved, {relayout_ms:.3f} ms at peak bandwidth"
    action = GATHER_WORDING.say(report.target).format(relayout=relayout) + _parity(c)
    if multi_term(r.path):  # the re-layout pass is where the split into parts costs nothing extra (split.py)
        action += (
            f" On {r.path}, write the input's parts in that pass (a high and a low plane, the same bytes) and the "
            "weight's once per version, so the K loop loads parts and converts nothing."
        )
    bases = ", ".join(f"{e:.0%} of {p}'s peak" for p, e in sorted(effs))
    return [
        recommendation(
            rule="gather_fed_conv",
            title="Feed the convolution's gathers: channels-last input, a K loop by tap, loads in flight",
            evidence=evidence,
            action=action,
            expected_gain=gain,
            gain_basis=f"share x (1 - T after / T now), T after = the convolutions' FLOPs at {bases} (what a first "
            "tensor-core kernel fed plain tiles reaches; measured on Triton GEMMs) plus the re-layout pass at peak "
            "bandwidth",
            kernels=hits,
            change="feed the tensor pipe",
        )
    ]


gather_fed_conv = Rule("gather_fed_conv", _gather_fed_conv, KINDS, (DEVICE_KERNELS,))  # the regime's gather_* figures
