"""Levers of the reference's structure (judge/structure.py: its FX graph), which no profile shows:
a reduction that folds into a smaller Linear, work on weights alone, outputs that do not depend on
the inputs. Each comes priced in the roofline's terms; its gain is the drop of the bound itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from kforge_mcp.advice.kinds import is_fma_gemm
from kforge_mcp.advice.rules.base import DEVICE_KERNELS, LEVERS, WEIGHT_WORK, Rule, ev, hot_kernels, recommendation
from kforge_mcp.judge.roofline import lookup_peaks
from kforge_mcp.profiling.report import ProfileReport, Recommendation


@dataclass(frozen=True)
class StructureThresholds:
    weight_work_min_share: float = 0.01  # kernels down to 1% of the forward count, not the usual 5%: work on weights
    # is pure waste, and a conversion pass is often small next to its GEMM (a choice)


STRUCTURE = StructureThresholds()
WEIGHTS_ONCE = "do the work on weights once per weight version"  # the change weights_once and a weight lever share


def _si(v: float) -> str:
    return f"{v:.4g}"


def _reference_structure(report: ProfileReport, t: StructureThresholds) -> list[Recommendation]:
    r = report.roofline
    if r is None or not r.levers or r.sol_ms <= 0:
        return []
    recs = []
    # Kernels doing the FLOPs on the FMA pipe gain what the lever saves at the FMA rate, not at the bound's path:
    # a lever that cuts a convolution's FLOPs 32-fold is worth more to them than the bound's drop on fp16 says.
    matrix = [k for k, _ in hot_kernels(report) if k.category in ("gemm", "conv")]
    fma = lookup_peaks(r.device)[0].flops.get("fp32") if matrix and all(is_fma_gemm(k) for k in matrix) else None
    for lever in r.levers:
        gain = 1.0 - lever.sol_ms_after / r.sol_ms
        basis = "1 - T_SOL after / T_SOL now, on the roofline's peaks"
        if fma and lever.flops_saved > 0:
            work = ((r.flops, r.bytes), (lever.flops_after, lever.bytes_after))
            now, after = (max(f / fma, b / r.peak_bandwidth) for f, b in work)
            gain = 1.0 - after / now
            basis = (
                "1 - T after / T now with the FLOPs on the FMA pipe the kernels use (fp32 peak) and the bytes at peak"
            )
        evidence = [
            ev("FLOPs per forward", f"{_si(r.flops)} -> {_si(lever.flops_after)}"),
            ev("minimum bytes per forward", f"{_si(r.bytes)} -> {_si(lever.bytes_after)}"),
            ev("T_SOL", f"{r.sol_ms * 1e3:.4g} us -> {lever.sol_ms_after * 1e3:.4g} us ({r.path} on {r.device})"),
        ]
        if lever.nodes:
            evidence.append(ev("reference nodes", ", ".join(lever.nodes[:8])))
        evidence += [ev(k, v) for k, v in lever.evidence.items()]
        recs.append(
            recommendation(
                rule="reference_structure",
                title=lever.title,
                evidence=evidence,
                action=f"{lever.action} ({lever.detail})",
                expected_gain=max(gain, 0.0),
                gain_basis=f"{basis} ({lever.kind}: "
                f"{_si(lever.flops_saved)} FLOPs and {_si(lever.bytes_saved)} bytes fewer a forward): the kernel is "
                "assumed to keep its fraction of speed of light"
                + ("; 0 when the bound does not move: the saving is outside the roofline's model" if gain <= 0 else ""),
                lowers_bound=True,
                change=WEIGHTS_ONCE if lever.kind == "weight_once" else f"{lever.kind}: {lever.title}",
            )
        )
    return recs


def _weights_once(report: ProfileReport, t: StructureThresholds) -> list[Recommendation]:
    """Kernels whose launches read the weights alone (profiling/weight_work.py: two forwards on different inputs
    compared launch by launch) redo the same work every forward."""
    hits = [
        (k, share, report.weight_work[k.name])
        for k, share in hot_kernels(report, t.weight_work_min_share)
        if k.name in report.weight_work
    ]
    if not hits:
        return []
    gain = sum(share * fraction for _, share, fraction in hits)
    names = ", ".join(k.name for k, _, _ in hits)
    params = sorted({p for k, _, _ in hits for p in report.weights_read.get(k.name, [])})
    evidence = [
        ev(
            "launches on weights alone",
            f"{fraction:.0%} of the kernel's bytes; the kernel takes {share:.0%} of the forward",
            kernel=k.name,
        )
        for k, share, fraction in hits
    ]
    evidence.append(ev("weights they read", ", ".join(params)))
    return [
        recommendation(
            rule="weights_once",
            title="Do the work on weights once per weight version, not every forward",
            evidence=evidence,
            action=(
                f"{names} read only the weights ({', '.join(params)}) in some launches, every forward, and what "
                "those launches make changes only when a weight does. Make it once per weight version: keep the "
                "result on the module with the version it was made from (each parameter's _version and data_ptr()) "
                "and remake it when either changes. verify accepts such a cache, and catches one keyed on the inputs."
            ),
            expected_gain=gain,
            gain_basis="the kernels' share of the forward (timeline) x the share of their bytes moved by launches on "
            "weights alone: that work leaves the forward, a version check stays",
            change=WEIGHTS_ONCE,
        )
    ]


reference_structure = Rule("reference_structure", _reference_structure, STRUCTURE, (LEVERS,))
weights_once = Rule("weights_once", _weights_once, STRUCTURE, (DEVICE_KERNELS, WEIGHT_WORK))
