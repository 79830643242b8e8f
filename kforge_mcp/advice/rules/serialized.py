"""MMAs the assembler serialized: ptxas reports (C7514/C7515) that a kernel's warpgroup MMAs each wait for the one
before, when other instructions read an accumulator while its MMAs are in flight (Triton 3.6: a tile's epilogue in a
branch of a flat persistent loop, an accumulator reset by a select, one dot feeding another within a step). No MMA
then overlaps the next or the loads, and TMA, stages or tile shapes cannot help until it is gone: the H100 conv
kernels that had it kept their tensor pipe 13-48% busy. On a convolution, removing it is a coin toss (below), so there
it is priced low and to be timed."""

from __future__ import annotations

from dataclasses import dataclass

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.kinds import busiest_tensor_pipe
from kforge_mcp.advice.rules.base import (
    DEVICE_KERNELS,
    Need,
    Rule,
    Wording,
    ev,
    hot_kernels,
    of_a_convolution,
    pct,
    recommendation,
)
from kforge_mcp.platforms.base import Vocabulary
from kforge_mcp.profiling.report import KernelProfile, ProfileReport, Recommendation


@dataclass(frozen=True)
class SerializedThresholds:
    fed_tensor_pct: float = 90.0  # what a kernel whose MMAs overlap keeps its tensor pipe busy at best (cuBLAS 97%)
    overlap_share: float = 0.5  # of the idle tensor time, the share serialization is taken to cost (a choice, low:
    # the MMAs' own waits are only part of what idles it)
    conv_factor: float = 0.15  # a convolution's kernel: on five H100 conv trajectory kernels, removing the
    # serialization (checked with Triton 3.6's ptxas before and after) realized +19%, +10%, +9%, -7% and -17%; the
    # two changes that followed this rule (38's, whose kernel it priced at 25% and 27%) realized -8% and -17%: their
    # tensor pipes idle for gathers, epilogues and short K loops as much as for MMA waits, as feed_tensor_pipe's conv
    # factor found (tensor_cores.py)


SERIALIZED = SerializedThresholds()
SERIALIZED_METRIC = Need(
    "the assembler's word on serialized MMAs",
    "the platform's vocabulary",
    lambda r: bool(vocabulary.of(r).serialized_mma_metric),
)

WORDING = Wording(
    "The assembler serialized this kernel's MMAs: each waits for the one before, so none overlaps the next or the "
    "loads. Read an accumulator only after the MMAs that write it have been waited for: run a tile's epilogue after "
    "its own K loop rather than in a branch of one loop over tiles and K steps, reset the accumulator after that "
    "wait, and do not feed one MMA's result to another within a K step. Check that the compiler's warning is gone.",
    {
        "triton": "ptxas serialized this kernel's wgmma: each waits for the one before, so none overlaps the next or "
        "the TMA loads. Triton 3.6 lets the accumulator be read while its dots are in flight when a tile's epilogue "
        "sits in an `if` inside one flat loop over tiles and K steps, when the accumulator is reset to a constant "
        "in that branch (the select reads it), or when two tl.dot calls chain within a step. Give each tile its own "
        "K loop (`for tile in range(pid, tiles, NUM_PROGS): acc = ...; for k in tl.range(..., num_stages=3): ...`) "
        "and run the epilogue after it; start the next tile's accumulator with tl.zeros after the loop; keep the "
        "products of a step independent. `kforge compile` warns while it is there.",
    },
)


CONV_CAVEAT = (
    " Uncertain on a convolution: on the H100 conv trajectories removing the serialization realized -17% to +19%; "
    "time the change against this kernel before keeping it."
)


def serialized(k: KernelProfile, v: Vocabulary) -> bool:
    return bool(v.serialized_mma_metric) and k.metrics.get(v.serialized_mma_metric) == 1.0


def _mma_serialized(report: ProfileReport, t: SerializedThresholds) -> list[Recommendation]:
    v = vocabulary.of(report)
    hits, gain, evidence, convs = [], 0.0, [], False
    for k, share in hot_kernels(report):
        if not serialized(k, v):
            continue
        _, busy = busiest_tensor_pipe(k, v)
        conv = of_a_convolution(k, report)
        convs = convs or conv
        gain += share * max(0.0, 1 - busy / t.fed_tensor_pct) * t.overlap_share * (t.conv_factor if conv else 1.0)
        hits.append(k.name)
        evidence += [
            ev("MMAs serialized by the assembler", "yes", "no", k.name),
            ev("tensor pipe busy", pct(busy), f"toward {t.fed_tensor_pct:g}%", k.name),
        ]
    if not hits:
        return []
    why = [n for n in report.notes if n.startswith(tuple(f"{name}: ptxas serialized" for name in hits))]
    return [
        recommendation(
            rule="mma_serialized",
            title="Let the MMAs overlap: the assembler serialized them",
            evidence=evidence + [ev("assembler", w) for w in why[:2]],
            action=WORDING.say(report.target) + (CONV_CAVEAT if convs else ""),
            expected_gain=gain,
            gain_basis=f"share x (1 - tensor pipe busy / {t.fed_tensor_pct:g}%) x {t.overlap_share:g}: half of the "
            "tensor pipe's idle time taken to be the MMAs waiting on each other"
            + (f"; x {t.conv_factor:g} on a convolution (measured on the H100 conv trajectories)" if convs else ""),
            kernels=hits,
            change="feed the tensor pipe",
        )
    ]


mma_serialized = Rule("mma_serialized", _mma_serialized, SERIALIZED, (DEVICE_KERNELS,), terms=(SERIALIZED_METRIC,))
