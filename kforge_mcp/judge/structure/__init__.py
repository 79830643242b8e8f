"""Levers in the reference's structure that a profile cannot see, read from its FX graph
(torch.fx.symbolic_trace, else torch.export) and priced in the roofline's terms:

- fold_reduction: a sum, mean or average pool over a Linear's output features is linear in them,
  sum_j (W x + b)_j = (sum_j W_j) x + sum_j b_j, so the GEMM becomes a GEMV (or a Linear with as
  many outputs as the pool has windows) with a pre-reduced weight; a sum over its rows pre-sums
  the input instead. Per-feature affine steps between them (scale, shift, divide) fold in too; max
  and any nonlinearity do not.
- reduce_first: a sum or mean over spatial dims of a convolution's output (through per-channel affine steps) is
  linear in its input, sum_d conv(x)[d] = sum over the kernel's taps along d of the weights applied to x summed
  over d (less the slices the border drops): reduce the input first, one partial sum per tap, and convolve in
  fewer dims; the FLOPs shrink by the extent reduced.
- weight_once: work on parameters alone (a transpose made contiguous, a scale, a concatenation, the
  conversion or split of a weight the compute path needs) is the same every forward: do it once per
  weight version (``param._version``), not per forward.
- constant_output / dead_work: outputs, or intermediates, that do not change with the inputs (the
  check verify makes, guards.degenerate_findings), and the work that feeds only them.
- cancelled_parameters: parameters that do not change the output (a bias before a normalization or a mean
  subtraction that removes it, a parameter never read), found by moving each in turn on a small instance in fp64.

FLOPs come from torch's FlopCounterMode per node (the roofline's counter) and bytes from the
roofline's model (inputs, parameters and outputs once), so a lever's T_SOL after the change is
directly comparable with the roofline's.
"""

from __future__ import annotations

from kforge_mcp.core.schemas import Roofline
from kforge_mcp.judge.precision_paths import MeasuredPaths
from kforge_mcp.judge.roofline import from_measured, lever_sol_ms, with_measured
from kforge_mcp.judge.structure.cancelled import cancelled_levers
from kforge_mcp.judge.structure.constants import constant_levers
from kforge_mcp.judge.structure.folding import fold_levers, reduce_first_levers
from kforge_mcp.judge.structure.graph import Graph, trace
from kforge_mcp.judge.structure.weights import convert_lever, weight_levers


def carry_levers(roof: Roofline, earlier: Roofline | None, source: str | None = None) -> Roofline:
    """Levers an earlier roofline of the same problem found and this one lacks (one counted before the paths
    were measured, or a profile's, whose worker checked outputs on its device that are too costly to run
    twice on a CPU), repriced on this roofline's path and peaks; ``source`` says where they came from. A measured
    time is set against the bound again: a kernel that takes a lever is judged against the lever's bound."""
    have = {(lv.kind, tuple(lv.nodes)) for lv in roof.levers}
    added = False
    for lv in earlier.levers if earlier is not None else []:
        if (lv.kind, tuple(lv.nodes)) in have:
            continue
        if "converted_bytes" in lv.evidence:  # a conversion for the path the bound takes now, if any
            names = str(lv.evidence["weights"]).split(", ")
            converted = convert_lever(roof, names, float(lv.evidence["weight_bytes"]))
            if converted is None:
                continue
            lv = converted
        roof.levers.append(lv.model_copy(update={"sol_ms_after": lever_sol_ms(roof, lv.flops_after, lv.bytes_after)}))
        added = True
        if source:
            roof.notes.append(f"lever '{lv.title}' {source}")
    for n in earlier.notes if earlier is not None else []:
        if ("not checked" in n or "levers" in n) and n not in roof.notes:
            roof.notes.append(n)
    return with_measured(roof, roof.measured_ms) if added and roof.measured_ms else roof


def measured_roofline(
    m: MeasuredPaths,
    device_name: str | None,
    measured_ms: float | None = None,
    peak_flops: float | None = None,
    peak_bandwidth: float | None = None,
) -> Roofline:
    """The roofline of measured paths (roofline.from_measured) with the levers read in the same worker, priced on
    its path and peaks: a kernel that takes one is judged against the lever's bound."""
    roof = from_measured(m, device_name, None, peak_flops, peak_bandwidth)
    roof = carry_levers(roof, roof.model_copy(update={"levers": m.levers, "notes": []}))
    return with_measured(roof, measured_ms)


def reference_levers(problem, device: str, roof: Roofline) -> Roofline:
    """The roofline with its levers (and notes on what could not be checked); runs the reference's code."""
    from kforge_mcp.judge.roofline import meta_reference

    try:
        model, inputs = meta_reference(problem)
        gm, how = trace(model, inputs)
        g = Graph(gm, how, inputs)
    except Exception as e:  # noqa: BLE001  (a reference that cannot run on meta or be traced has no levers)
        roof.notes.append(f"levers of the reference's structure unavailable: {type(e).__name__}: {e}"[:400])
        return roof
    roof.levers = fold_levers(g, roof) + reduce_first_levers(g, roof) + weight_levers(g, roof)
    try:
        found, notes = constant_levers(g, roof, problem, device)
        roof.levers += found
        roof.notes += notes
    except Exception as e:  # noqa: BLE001
        roof.notes.append(f"constant outputs not checked: {type(e).__name__}: {e}"[:400])
    # on the CPU worker that measures the paths (a GPU's profile carries its levers): where the output does not
    # depend on the inputs at all, nothing more is said of its parameters
    if device == "cpu" and not any(lv.kind == "constant_output" for lv in roof.levers):
        try:
            found, notes = cancelled_levers(g, roof, problem)
            roof.levers += found
            roof.notes += notes
        except Exception as e:  # noqa: BLE001
            roof.notes.append(f"cancelled parameters not checked: {type(e).__name__}: {e}"[:400])
    return roof
