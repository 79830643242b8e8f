"""A convolution's tensor-core kernel that already does what the feeding advice asks of it on a convolution
(feed_tensor_pipe's conv wording): operands by TMA, a persistent grid of two programs per SM that both stay
resident, and MMAs the assembler left asynchronous. Asking again repeats a change that is made: on the H100 conv
trajectories, kernels that had made it got the same advice step after step (priced 3-11%), and an agent that
follows only the top advice goes round in a circle. Such a kernel's feeding advice is set apart at no gain, with
what its tensor pipe still does, so the advice left (or none) says where the rules stop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kforge_mcp.advice.kinds import busiest_tensor_pipe
from kforge_mcp.advice.rules.base import ev, pct, recommendation
from kforge_mcp.advice.rules.split import fed_by_copy
from kforge_mcp.platforms.base import Vocabulary
from kforge_mcp.profiling.report import KernelProfile, Recommendation


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
    return recommendation(
        rule="feed_tensor_pipe",
        title="Keep the tensor cores fed: done already",
        evidence=evidence,
        action=f"{names} already take their operands by TMA, run a persistent grid of two programs per SM that both "
        "stay resident, and keep their MMAs asynchronous: what this advice asks of a convolution. What still idles "
        "the tensor pipe (the epilogue, gathered operands, short K loops) no rule here prices: time a change of your "
        "own against this kernel before keeping it.",
        expected_gain=0.0,
        gain_basis="the change is made (on the H100 conv trajectories, kernels that had made it were told the same "
        "thing step after step, priced 3-11%)",
        kernels=[k.name for k in kernels],
        change="feed the tensor pipe",
    )


def few_channels(kernels: Sequence[KernelProfile], v: Vocabulary, c_in: int, mma_k: int) -> Recommendation:
    """The feeding advice, set apart at no gain: a convolution whose taps each give fewer input channels than the
    smallest K of an MMA step on the device (``mma_k``). Its products are thin (K a tap's few channels, or a row's
    taps packed together; N its output channels), so its time goes to gathering each input element once per tap and
    to its epilogue, not to MMAs waiting on TMA: on the H100 conv trajectories (Conv3d with 3 input channels) a TMA
    persistent grid ran 14% slower and two accumulators with two programs per SM 9% slower, where the pipe's idle
    share priced them at 10%."""
    evidence = []
    for k in kernels:
        _, busy = busiest_tensor_pipe(k, v)
        evidence += [
            ev("input channels per tap", c_in, f">= {mma_k} (the smallest K of an MMA step)", k.name),
            ev("compute path", k.compute_path, kernel=k.name),
            ev("tensor pipe busy", pct(busy), kernel=k.name),
        ]
    names = ", ".join(k.name for k in kernels)
    return recommendation(
        rule="feed_tensor_pipe",
        title="Keep the tensor cores fed: not with so few input channels",
        evidence=evidence,
        action=f"{names} compute(s) a convolution whose taps give {c_in} input channel(s) each, fewer than any MMA "
        f"step's K ({mma_k} on this device, more for narrower types): its products are thin, each input element is "
        "gathered again for every tap, and TMA, deeper pipelines and more programs per SM leave the tensor pipe as "
        "idle. What can pay is gathering less: a row's taps packed into one K step from a channels-last input "
        "(contiguous, unmasked), an input tile loaded once and reused for its taps, or the FMA path (tl.dot with "
        "input_precision='ieee', exact fp32) over the taps' real K, which pads nothing. Uncertain: no rule here "
        "prices them; time the change against this kernel before keeping it.",
        expected_gain=0.0,
        gain_basis="not priced: on the H100 conv trajectories, feeding changes to such a kernel realized -14% and "
        "-9% where the tensor pipe's idle share promised 10%",
        kernels=[k.name for k in kernels],
        change="feed the tensor pipe",
    )
