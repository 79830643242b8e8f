"""A tile's sums reduced across its threads, tile after tile: a tensor-core convolution whose epilogue reduces each
tile's outputs over its rows (a norm's per-channel sums and sums of squares, a softmax's sum of exponentials) and adds
them to a buffer with atomics pays, for every tile, a reduction across its warps through shared memory (barriers) and
its atomics. With a short K loop that epilogue is a large part of a tile's time. Keep the partial sums in registers
across the tiles a program walks (an elementwise add a tile), give each program a contiguous run of tiles so that what
the sums belong to (the sample, the channel tile) seldom changes, and reduce and add them once a run.

Drawn from three H200 pairs (bench/results/tile-sums/h200.md), each kernel against itself with the sums kept in
registers: Conv3d_GroupNorm_Mean (81 multiply-adds an output pixel) 0.695 -> 0.574 ms and
ConvTranspose3d_AvgPool_Clamp_Softmax (108: 32 channels x 27 taps / 8 stride phases) 2.719 -> 2.058 ms faster;
ConvTranspose3d_ReLU_GroupNorm (1728) 2.025 -> 2.146 ms slower, its epilogue a small part of a tile's 162 MMAs. The
limit on that depth is where those pairs part. The accumulators take registers: a kernel must have room for them
(at shapes the rule was not drawn from, 23's kernel with 64 output channels, at 250 registers, lost 18-22%; on a
16 x 64 x 64 volume, at 122, it gained 20.6% for 17% expected: bench/results/tile-sums/h200-held-out.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.kinds import is_tensor_gemm
from kforge_mcp.advice.rules.base import ATOMICS, DEVICE_KERNELS, Rule, Wording, ev, hot_kernels, pct, recommendation
from kforge_mcp.judge.roofline.conv import depth
from kforge_mcp.platforms.base import Vocabulary
from kforge_mcp.profiling.report import KernelProfile, ProfileReport, Recommendation


@dataclass(frozen=True)
class TileSumsThresholds:
    atomics_per_program: float = 8.0  # more atomic instructions a program than this: it adds its sums every tile
    # (the H100 conv trajectories' persistent kernels: 160-265 a program; one add a run would be 2-4)
    short_k: int = 256  # an output pixel's multiply-adds (depth) up to this: the epilogue weighs on each tile
    warps_per_scheduler: float = 16.0  # an NVIDIA SM's 64 resident warps over its 4 schedulers (sm_80, sm_90)
    max_registers: int = 191  # room for the sums: a [128, 64] fp32 accumulator over 4 warps takes 64 registers a
    # thread of the 255 (23 and 38 went from 162 and 173 to 228 and 245; a kernel at 250 lost 18-22%)


TILE_SUMS = TileSumsThresholds()

TILE_SUMS_WORDING = Wording(
    "The kernel reduces every tile's outputs across its threads and adds them to the sums buffer with atomics, tile "
    "after tile: each reduction crosses warps through shared memory and waits at barriers, and the tile's K loop is "
    "too short ({k}) to hide it. Keep one partial-sum accumulator per sum in registers (the tile's shape), add each "
    "tile's masked outputs to it elementwise, and reduce it across threads and add it to the buffer once, when what "
    "the sums belong to changes (the sample, the channel tile) and at the end. Give each persistent program a "
    "contiguous run of tiles (first = pid x ceil(tiles / programs)) ordered so that key changes seldom.",
    {
        "triton": "The kernel reduces every tile's outputs across its threads (tl.sum over the tile's rows) and "
        "adds them to the sums buffer with tl.atomic_add, tile after tile: each tl.sum crosses warps through shared "
        "memory and waits at barriers, and the tile's K loop is too short ({k}) to hide it. Keep one accumulator per "
        "sum in registers, s_acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32), add each tile's masked outputs to it "
        "(s_acc += v; q_acc += v * v), and tl.sum it and tl.atomic_add the result once, when what the sums belong to "
        "changes (the sample, the channel tile: an `if key != key_run:` that adds and zeroes them) and after the "
        "loop. Walk a contiguous run of tiles a program (first = pid * tl.cdiv(tiles, NUM_PROGS); for tile in "
        "range(first, min(first + per_prog, tiles))), ordered so that key changes seldom.",
    },
)


def barrier_share(k: KernelProfile, v: Vocabulary, t: TileSumsThresholds) -> float | None:
    """The share of a warp's cycles spent waiting at barriers: its barrier stall cycles per issued instruction over
    its cycles per issued instruction (warps a scheduler holds over the scheduler's issue rate); None where the
    profile does not say."""
    stall = next((s.cycles_per_issue for s in k.top_stalls if s.reason in v.barrier_stalls), None)
    if stall is None or not k.achieved_occupancy_pct or not k.issue_active_pct:
        return None
    cycles_per_issue = (k.achieved_occupancy_pct / 100 * t.warps_per_scheduler) / (k.issue_active_pct / 100)
    return min(1.0, stall / cycles_per_issue) if cycles_per_issue > 0 else None


def _tile_sums(report: ProfileReport, t: TileSumsThresholds) -> list[Recommendation]:
    r = report.roofline
    if r is None or not r.convs:
        return []
    k_conv = round(max(depth(c) for c in r.convs))
    if not 0 < k_conv <= t.short_k:
        return []
    v = vocabulary.of(report)
    hits, gain, evidence = [], 0.0, []
    for k, share in hot_kernels(report):
        programs = k.blocks
        if not is_tensor_gemm(k) or not programs or (k.atomic_instructions or 0) / programs <= t.atomics_per_program:
            continue
        if k.registers is None or k.registers > t.max_registers or k.spills or k.local_sectors:
            continue  # no room for the accumulators: they would spill
        barriers = barrier_share(k, v, t)
        if barriers is None:
            continue
        gain += share * barriers
        hits.append(k.name)
        evidence += [
            ev("atomic instructions a program", round((k.atomic_instructions or 0) / programs, 1), "a few", k.name),
            ev("registers a thread", k.registers, f"<= {t.max_registers}: room for the sums", k.name),
            ev("warp cycles waiting at barriers", pct(100 * barriers), "", k.name),
        ]
    if not hits:
        return []
    evidence.append(ev("multiply-adds an output pixel takes (C_in x taps met)", k_conv, f"short: <= {t.short_k}"))
    return [
        recommendation(
            rule="tile_sums",
            title="Keep the tiles' sums in registers; reduce and add them once a run of tiles",
            evidence=evidence,
            action=TILE_SUMS_WORDING.say(report.target).format(k=f"K = {k_conv}"),
            expected_gain=gain,
            gain_basis="share x the warps' cycles waiting at barriers (barrier stall cycles per issue over cycles per "
            "issue): the per-tile reductions go, a low estimate (on an H200 two such kernels realized 20% and 23% "
            "where this gave 19% and 7% on their own profiles)",
            kernels=hits,
            change="keep the sums in registers across tiles",
        )
    ]


# NVIDIA only: the cycles per issue take an NVIDIA SM's warps per scheduler
tile_sums = Rule("tile_sums", _tile_sums, TILE_SUMS, (DEVICE_KERNELS, ATOMICS), vendors=frozenset({"nvidia"}))
