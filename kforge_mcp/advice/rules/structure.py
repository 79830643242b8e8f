"""Levers of the reference's structure (judge/structure.py: its FX graph), which no profile shows:
a reduction that folds into a smaller Linear, work on weights alone, outputs that do not depend on
the inputs. Each comes priced in the roofline's terms; its gain is the drop of the bound itself.
"""

from __future__ import annotations

from kforge_mcp.advice.rules.base import ev, recommendation, rule
from kforge_mcp.profiling.report import ProfileReport, Recommendation


def _si(v: float) -> str:
    return f"{v:.4g}"


@rule
def reference_structure(report: ProfileReport) -> list[Recommendation]:
    r = report.roofline
    if r is None or not r.levers or r.sol_ms <= 0:
        return []
    recs = []
    for lever in r.levers:
        gain = 1.0 - lever.sol_ms_after / r.sol_ms
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
                gain_basis=f"1 - T_SOL after / T_SOL now, on the roofline's peaks ({lever.kind}: "
                f"{_si(lever.flops_saved)} FLOPs and {_si(lever.bytes_saved)} bytes fewer a forward): the kernel is "
                "assumed to keep its fraction of speed of light"
                + ("; 0 when the bound does not move: the saving is outside the roofline's model" if gain <= 0 else ""),
                lowers_bound=True,
            )
        )
    return recs
