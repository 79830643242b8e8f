"""Feeding a tensor-core kernel's tensor pipe (TMA, deeper pipelines, persistent tiles; on a convolution two
programs per SM), and when that advice is set apart at no gain instead of asked:

- a convolution's kernel that already does what the advice asks of a convolution (operands by TMA, a persistent
  grid of two programs per SM that both stay resident, MMAs the assembler left asynchronous). Asking again repeats
  a change that is made: on the H100 conv trajectories, kernels that had made it got the same advice step after
  step (priced 3-11%), and an agent that follows only the top advice goes round in a circle;
- a convolution whose taps give fewer input channels than an MMA step's K, whose pipe idles for its gathers.

Set apart, the advice says what the tensor pipe still does, so the advice left (or none) says where the rules stop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.kinds import (
    busiest_tensor_pipe,
    few_channels_per_tap,
    is_gather_fed_conv,
    is_latency_bound,
    is_tensor_gemm,
)
from kforge_mcp.advice.rules.base import (
    DEVICE_KERNELS,
    Rule,
    Wording,
    ev,
    hot_kernels,
    of_a_convolution,
    pct,
    recommendation,
)
from kforge_mcp.advice.rules.compute import COMPUTE, ComputeThresholds, limiting_unit
from kforge_mcp.advice.rules.serialized import serialized
from kforge_mcp.advice.rules.split import SPLIT_WITH_FEED, fed_by_copy, splits_in_loop
from kforge_mcp.advice.rules.tensor_cores import TENSOR_WORDING, tensor_action
from kforge_mcp.judge.roofline import lookup_peaks
from kforge_mcp.platforms import device_arch
from kforge_mcp.platforms.base import Vocabulary
from kforge_mcp.profiling.report import KernelProfile, ProfileReport, Recommendation


@dataclass(frozen=True)
class FedThresholds:
    programs_per_sm: float = 2.0  # what the advice asks for on a convolution: a persistent grid of 2 x the SM count
    grid_slack: float = 0.05  # a grid of whole programs over the SM count: 2 within this
    resident_share: float = 0.9  # achieved occupancy holds at least this share of both programs' warps


FED = FedThresholds()


def fed_as_advised(k: KernelProfile, v: Vocabulary, arch: str | None, t: FedThresholds = FED) -> bool:
    """The kernel takes its operands by TMA, runs two programs per SM that both stay resident (its grid over the SM
    count, and its achieved occupancy against the arch's resident warps) and its MMAs are not serialized."""
    limits = v.limits(arch)
    programs = k.metrics.get("blocks_per_sm")
    if limits is None or programs is None or not k.num_warps or k.achieved_occupancy_pct is None:
        return False
    resident = k.achieved_occupancy_pct / 100 * limits.warps / k.num_warps
    return (
        fed_by_copy(k, v)
        and abs(programs - t.programs_per_sm) <= t.grid_slack
        and resident >= t.programs_per_sm * t.resident_share
        and bool(v.serialized_mma_metric)
        and k.metrics.get(v.serialized_mma_metric) == 0.0
    )


def already_fed(kernels: Sequence[KernelProfile], v: Vocabulary) -> Recommendation:
    """The feeding advice, set apart at no gain: the kernels have made its change."""
    evidence = []
    for k in kernels:
        _, busy = busiest_tensor_pipe(k, v)
        evidence += [
            ev("operands by TMA (copy pipe busy)", pct(k.pipes.get(v.copy_pipe)), kernel=k.name),
            ev("programs per SM (grid / SMs)", round(k.metrics.get("blocks_per_sm", 0.0), 2), "2", k.name),
            ev("achieved occupancy", pct(k.achieved_occupancy_pct), "both programs' warps resident", k.name),
            ev("MMAs serialized by the assembler", "no", kernel=k.name),
            ev("tensor pipe busy", pct(busy), kernel=k.name),
        ]
    names = ", ".join(k.name for k in kernels)
    return _set_apart(
        kernels,
        evidence,
        title="Keep the tensor cores fed: done already",
        action=f"{names} already take their operands by TMA, run a persistent grid of two programs per SM that both "
        "stay resident, and keep their MMAs asynchronous: what this advice asks of a convolution. What still idles "
        "the tensor pipe (the epilogue, gathered operands, short K loops) no rule here prices: time a change of your "
        "own against this kernel before keeping it.",
        gain_basis="the change is made (on the H100 conv trajectories, kernels that had made it were told the same "
        "thing step after step, priced 3-11%)",
    )


def few_channels(kernels: Sequence[KernelProfile], v: Vocabulary, c_in: int, mma_k: int) -> Recommendation:
    """The feeding advice, set apart at no gain: a convolution whose taps each give fewer input channels than the
    smallest K of an MMA step on the device (``mma_k``). Its products are thin (K a tap's few channels, or a row's
    taps packed together; N its output channels), so its time goes to gathering each input element once per tap and
    to its epilogue, not to MMAs waiting on TMA: on the H100 conv trajectories (Conv3d with 3 input channels) a TMA
    persistent grid ran 14% slower and two accumulators with two programs per SM 9% slower, where the pipe's idle
    share priced them at 10%; at two shapes the rule was not drawn from, the TMA persistent grid ran 8% faster (rows
    of 62 voxels in 32-voxel boxes) and 90% slower (64 output channels in one tile)."""
    evidence = []
    for k in kernels:
        _, busy = busiest_tensor_pipe(k, v)
        evidence += [
            ev("input channels per tap", c_in, f">= {mma_k} (the smallest K of an MMA step)", k.name),
            ev("compute path", k.compute_path, kernel=k.name),
            ev("tensor pipe busy", pct(busy), kernel=k.name),
        ]
    names = ", ".join(k.name for k in kernels)
    return _set_apart(
        kernels,
        evidence,
        title="Keep the tensor cores fed: not with so few input channels",
        action=f"{names} compute(s) a convolution whose taps give {c_in} input channel(s) each, fewer than any MMA "
        f"step's K ({mma_k} on this device, more for narrower types): its products are thin, each input element is "
        "gathered again for every tap, and TMA, deeper pipelines and more programs per SM leave the tensor pipe as "
        "idle. What can pay is gathering less: a row's taps packed into one K step from a channels-last input "
        "(contiguous, unmasked), an input tile loaded once and reused for its taps, or the FMA path (tl.dot with "
        "input_precision='ieee', exact fp32) over the taps' real K, which pads nothing. Uncertain: no rule here "
        "prices them; time the change against this kernel before keeping it.",
        gain_basis="not priced: on an H100, feeding 23's Conv3d of 3 channels (TMA, a persistent grid, two programs "
        "per SM) realized -14% and -9% at its published shape where the tensor pipe's idle share promised 10%, and "
        "+8% and -90% at two other shapes (bench/feed_few_channels.py)",
    )


def _set_apart(kernels: Sequence[KernelProfile], evidence: list, title: str, action: str, gain_basis: str):
    """The feeding advice at no gain, not ranked: what the kernels do and why feeding is not asked of them."""
    return recommendation(
        rule="feed_tensor_pipe",
        title=title,
        evidence=evidence,
        action=action,
        expected_gain=0.0,
        gain_basis=gain_basis,
        kernels=[k.name for k in kernels],
        change="feed the tensor pipe",
    )


FEED_WORDING = Wording(
    "The tensor pipe waits on data. Feed it: load tiles with the tensor memory accelerator (TMA) or asynchronous "
    "copies, pipeline deeper (3-5 stages) so loads overlap the MMAs, use larger tiles per CTA (128x256 or 256x128 "
    "with 8 warps, a K tile of 64), a persistent grid of one program per SM walking tiles in grouped order (L2 "
    "reuse, no tail wave), and warp specialization so producer warps load while consumer warps compute. Do not "
    "trade registers for occupancy: one or two CTAs per SM is the design.",
    {
        "triton": "The tensor pipe waits on data. Feed it: load tiles with TMA (tl.make_tensor_descriptor or a host "
        "TensorDescriptor), pipeline deeper (num_stages 3-5) so loads overlap the MMAs, use larger tiles per CTA "
        "(128x256 or 256x128 with num_warps=8, BLOCK_K 64), a persistent grid of one program per SM walking tiles in "
        "grouped order (L2 reuse, no tail wave), and warp specialization (tl.range(..., warp_specialize=True)) so "
        "producer warps load while consumer warps compute. Do not trade registers for occupancy: one or two CTAs per "
        "SM is the design.",
        "cuda": "The tensor pipe waits on data. Feed it: load tiles with TMA (cp.async.bulk.tensor on a CUtensorMap "
        "made on the host) or cp.async into a 3-5 stage shared-memory ring (cuda::pipeline) so loads overlap the "
        "MMAs, use larger tiles per CTA (128x256 with two consumer warpgroups on wgmma.mma_async), a persistent grid "
        "of one CTA per SM walking tiles in grouped order (L2 reuse, no tail wave), and a producer warp that only "
        "loads while the consumer warpgroups compute (setmaxnreg to shift registers to them). Do not trade registers "
        "for occupancy: one or two CTAs per SM is the design.",
        "cute": "The tensor pipe waits on data. Feed it: TMA copy atoms (SM90_TMA_LOAD) into a PipelineTmaAsync of "
        "3-5 stages so loads overlap the GMMAs, larger CTA tiles (128x256), a persistent tile scheduler with one CTA "
        "per SM in grouped order, and warp-specialized producer and consumer warpgroups. Do not trade registers for "
        "occupancy: one or two CTAs per SM is the design.",
    },
)
FEED_CONV_WORDING = Wording(
    "The tensor pipe of a convolution kernel idles for its epilogue, its stores and its waits on each MMA as much "
    "as for loads. Keep two programs per SM (tiles of 128 output pixels by 64-128 channels) so one program's "
    "epilogue and stores overlap the other's MMAs, operands by TMA with 3-4 stages, and for a multi-term path one "
    "accumulator for the small terms so each K step waits on the tensor cores once. Do not grow tiles to 256 rows "
    "at one program per SM: on the H100 conv trajectories that made three kernels 10-30% slower.",
    {
        "triton": "The tensor pipe of a convolution kernel idles for its epilogue, its stores and its waits on each "
        "MMA as much as for loads. Keep two programs per SM (BLOCK_M 128 output pixels by BLOCK_N 64-128 channels, "
        "num_warps 4, a persistent grid of 2 x the SM count) so one program's epilogue and stores overlap the "
        "other's tl.dot chain; operands by TMA descriptors with num_stages 3-4; on bf16x3, sum the two small "
        "products into an accumulator of their own so each K step waits on the tensor cores once. Do not grow tiles "
        "to 256 rows at one program per SM: on the H100 conv trajectories that made three kernels 10-30% slower "
        "(one with 128-row tiles ran 1.36 ms at one program per SM, 0.90 at two, 0.87 at four).",
    },
)
WGMMA_WORDING = Wording(
    "The MMAs run as mma.sync (hmma) on a Hopper part, which peaks well below its warpgroup MMAs (wgmma): use wgmma. ",
    {
        "triton": "The MMAs run as mma.sync (hmma) on a Hopper part, which peaks well below wgmma: use wgmma (Triton "
        "emits it for tl.dot with num_warps a multiple of 4 and BLOCK_M >= 64 on sm_90). ",
        "cuda": "The MMAs run as mma.sync (hmma) on a Hopper part, which peaks well below wgmma: issue "
        "wgmma.mma_async from a warpgroup of 4 warps with operands in shared memory (sm_90a). ",
        "cute": "The MMAs run as mma.sync (hmma) on a Hopper part, which peaks well below wgmma: use SM90 GMMA atoms "
        "(sm_90a) instead of the SM80 MMA atoms. ",
    },
)


def _feed_evidence(k, pipe: str | None, busy: float, t: ComputeThresholds) -> list:
    out = [
        ev(f"{pipe or 'tensor'} pipe busy", pct(busy) if pipe else None, f">= {t.fed_tensor_pct:g}%", k.name),
        ev("compute path", f"{k.compute_path} (told by {k.kind_basis})", kernel=k.name),
    ]
    if k.registers is not None:
        out.append(ev("registers per thread", k.registers, "168-255 is normal for a Hopper GEMM", k.name))
    if k.achieved_occupancy_pct is not None:
        out.append(ev("achieved occupancy", pct(k.achieved_occupancy_pct), "low is normal (1-2 CTAs/SM)", k.name))
    if k.top_stalls:
        s = k.top_stalls[0]
        out.append(ev(f"top stall: {s.reason}", s.cycles_per_issue, kernel=k.name))
    if k.waves_per_sm is not None:
        out.append(ev("waves per SM", round(k.waves_per_sm, 2), "many, or exactly 1 with a persistent grid", k.name))
    return out


def _feeds(k, v, r, frac: float | None, t: ComputeThresholds) -> bool:
    """A tensor-core kernel whose pipe waits on data, not one another rule speaks for."""
    if not is_tensor_gemm(k) or limiting_unit(k, v, frac, t) is not None or is_latency_bound(k, v):
        return False  # a latency-bound kernel's pipe idles for latency: latency_bound speaks for it
    if is_gather_fed_conv(k, v, bool(r and r.convs)):
        return False  # a convolution waiting on its own gathers: gather_fed_conv speaks for it
    if serialized(k, v):
        return False  # its MMAs wait on each other, which feeding does not relieve: mma_serialized speaks for it
    # fed by TMA already, a kernel whose pipe waits on the split in its loop is split_once's
    return not (splits_in_loop(k, v, r, bool(r and r.convs)) and fed_by_copy(k, v))


def _feed_action(report: ProfileReport, convs: bool, split_first: bool, paths: set, shared: list[bool]) -> str:
    """What feeding asks of these kernels, and where it is uncertain."""
    r, v = report.roofline, vocabulary.of(report)
    action = (FEED_CONV_WORDING if convs else FEED_WORDING).say(report.target) + (
        SPLIT_WITH_FEED if split_first else ""
    )
    if any(p.startswith(v.superseded_mma_units) for p in paths):
        action = WGMMA_WORDING.say(report.target) + action
    if any("3xtf32" in (k.compute_path or "") for k, _ in hot_kernels(report)) or (r and r.path == "3xtf32"):
        action += " With 3xTF32 each product costs three MMAs, so its ceiling is a third of TF32's."
    if convs:
        action += (
            " Uncertain on a convolution: on the H100 conv trajectories feeding changes realized -30% to +31% where "
            "the tensor pipe's idle share promised 6-68%; time the change against this kernel before keeping it."
        )
    if any(shared):
        action += (
            " Uncertain here: the MMAs wait on shared memory (short scoreboard / MIO), which deeper pipelines and "
            "TMA do not relieve; fewer shared-memory reads per MMA (bf16 operands, larger warp tiles) may."
        )
    if r and r.paths_measured and r.path in TENSOR_WORDING:  # the path measured to pass, which may beat the kernel's
        action += (
            f" The bound assumes {r.path_reason}; a kernel on a slower path cannot reach it: use "
            f"{tensor_action(r.path, report.target)}."
        )
    return action


def _feed_tensor_pipe(report: ProfileReport, t: ComputeThresholds) -> list[Recommendation]:
    r = report.roofline
    v = vocabulary.of(report)
    hits, gain, evidence, paths, bases, shared = [], 0.0, [], set(), set(), []
    split_first = convs = False
    frac = r.fraction_of_sol if r is not None else None
    arch, followed, padded = device_arch(r.device) if r is not None else None, [], []
    mma_k = min(lookup_peaks(r.device)[0].mma_k.values(), default=None) if r is not None and r.convs else None
    thin = few_channels_per_tap(r.convs, mma_k) if r is not None else None  # input channels a tap, too few for it
    for k, share in hot_kernels(report):
        if not _feeds(k, v, r, frac, t):
            continue
        conv = of_a_convolution(k, report)
        if conv and fed_as_advised(k, v, arch):
            followed.append(k)  # the change is made: set apart, not asked again
            continue
        if conv and thin is not None:
            padded.append(k)  # its pipe idles for padding and gathers: feeding does not pay
            continue
        split_first = split_first or splits_in_loop(k, v, r, bool(r and r.convs))
        pipe, busy = busiest_tensor_pipe(k, v)
        if pipe is not None and k.pipes and busy < t.limit_unit_pct:
            g = 1 - busy / t.fed_tensor_pct
            basis = f"share x (1 - tensor pipe {busy:.0f}% / {t.fed_tensor_pct:g}%)"
        elif frac is not None and (own := min(1.0, frac / share)) < t.limit_fraction:  # busy, far from its bound
            # the kernel's own fraction: the bound set against this kernel's time, not the whole forward's (time
            # in other kernels, e.g. a conversion pass, is theirs to win back)
            g = 1 - own / t.limit_fraction
            basis = f"share x (1 - the kernel's fraction of SOL (the forward's / its share) / {t.limit_fraction})"
        else:
            continue
        if k.top_stalls and k.top_stalls[0].reason in v.shared_stalls:
            g *= t.shared_bound_factor
            basis += f" x {t.shared_bound_factor:g} (the top stall, {k.top_stalls[0].reason}, is shared memory)"
        if conv:
            g *= t.conv_feed_factor
            basis += f" x {t.conv_feed_factor:g} (a convolution: measured on the H100 conv trajectories)"
            convs = True
        shared.append(k.top_stalls[0].reason in v.shared_stalls if k.top_stalls else False)
        gain += share * g
        bases.add(basis)
        hits.append(k.name)
        paths.add(k.compute_path or "")
        evidence += _feed_evidence(k, pipe, busy, t)
    if not hits:
        if padded and thin is not None and mma_k is not None:
            return [few_channels(padded, v, thin, mma_k)]
        return [already_fed(followed, v)] if followed else []
    action = _feed_action(report, convs, split_first, paths, shared)
    return [
        recommendation(
            rule="feed_tensor_pipe",
            title="Keep the tensor cores fed (two programs per SM, TMA, one wait per K step)"
            if convs
            else "Keep the tensor cores fed (TMA, deeper pipeline, bigger persistent tiles)",
            evidence=evidence,
            action=action,
            expected_gain=gain,
            gain_basis="; ".join(sorted(bases)) + ": time shrinks with the tensor pipe's busy fraction up to what "
            "cuBLAS reaches (measured: Triton bf16 GEMMs on an H200 realized 0.41-0.47 where this gave 0.49-0.50)",
            kernels=hits,
            change="feed the tensor pipe",
            **({"priority": "low"} if all(shared) or convs else {}),
        )
    ]


feed_tensor_pipe = Rule("feed_tensor_pipe", _feed_tensor_pipe, COMPUTE, (DEVICE_KERNELS,))
