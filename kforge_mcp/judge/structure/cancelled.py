"""cancelled_parameters: parameters whose values do not reach the output.

A constant added before a mean that is subtracted again is removed by it: a convolution's or a Linear's bias
before a training-mode BatchNorm or an instance norm, a BatchNorm's shift before a spatial mean subtraction, a
scalar before a layer norm; a parameter the forward never reads is dead. These are found by trying, not by
matching patterns: each parameter in turn is moved by a random change at least as large as itself, on a small
instance of the problem in fp64 on the CPU, and the output must not move beyond fp64 rounding. The kernel then
leaves them out: no load, and no add where they were added.
"""

from __future__ import annotations

import math
from typing import Any

from kforge_mcp.core.schemas import Lever, Roofline
from kforge_mcp.judge.structure.graph import Graph, _lever, node_names

CHECK_S = 12.0  # the check's fp64 forwards, at the CPU rates of the paths' plan (precision_paths.cost), at most
MOVED = 1e-9  # the most the output may move, of its largest magnitude: fp64 rounding through a reference, with room
# a size reduced below this (or below its full value) could let a norm's mean remove everything, as it would not
# at the problem's own sizes; the batch, over which only a BatchNorm's statistics run, shrinks to 2
SMALLEST = 4
SMALLEST_BATCH = 2
SEED = 7
# parameters the check builds in fp64 and moves, at most (elements): a Linear of 8192 x 8192 alone took 2.5-3.6 s
# on 2 cores, in a worker whose measurement of the paths a first profile may be waiting for
PARAMETERS_MAX = 20 * 2**20
TIME_S = 1.5  # the forwards as timed, at most: the plan's rates are far off for fp64 (a transposed 3-D convolution)


def _outputs(model, inputs) -> list:
    import torch

    from kforge_mcp.core.problem import seed_everything
    from kforge_mcp.judge.correctness import flatten_outputs

    seed_everything(SEED)  # a dropout draws the same mask every forward
    with torch.no_grad():
        out = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
    return [t.detach().clone() for t in flatten_outputs(out) if isinstance(t, torch.Tensor)]


def _moved(after: list, before: list) -> float:
    return max((float((a - b).abs().max()) for a, b in zip(after, before, strict=True) if a.numel()), default=0.0)


def _elements(g: Graph, n) -> float:
    v: Any = g.value.get(n)
    return float(v.numel()) if hasattr(v, "numel") else 0.0


def _own_parameters(g: Graph, n) -> set:
    """The parameters node ``n`` reads itself (those whose users, Graph.param_users, it is among)."""
    return {name for name, _ in g.gm.named_parameters() if n in g.param_users(name)}


def _moved_parameters(model, inputs, before: list) -> tuple[dict[str, float], float]:
    """Each parameter that, moved, leaves the output (``before``) within fp64 rounding (how far it moved), and the
    output's largest magnitude."""
    import torch

    scale = max((float(t.abs().max()) for t in before if t.numel() and t.is_floating_point()), default=0.0)
    if not scale or not math.isfinite(scale):
        return {}, scale
    draw = torch.Generator().manual_seed(SEED)
    cancelled: dict[str, float] = {}
    for name, p in model.named_parameters():
        if not p.is_floating_point() or not p.numel():
            continue
        kept = p.detach().clone()
        with torch.no_grad():
            p.add_(torch.randn(p.shape, generator=draw, dtype=p.dtype) * max(1.0, float(kept.abs().max())))
        moved = _moved(_outputs(model, inputs), before)
        with torch.no_grad():
            p.copy_(kept)
        if moved <= MOVED * scale:
            cancelled[name] = moved
    return cancelled, scale


def cancelled_levers(g: Graph, roof: Roofline, problem) -> tuple[list[Lever], list[str]]:
    """The parameters that do not change the reference's output, as one lever; notes where it was not checked."""
    import time

    import torch

    from kforge_mcp.core.problem import reference_model
    from kforge_mcp.core.reduced import NOT_BUILT, OVER_BUDGET, reduce_problem
    from kforge_mcp.judge.precision_paths.cost import MEMORY_BYTES, plan

    sizes = [p.numel() for p in g.gm.parameters() if p.is_floating_point()]
    if sum(sizes) > PARAMETERS_MAX:
        return [], [
            f"cancelled parameters not checked: its parameters hold {sum(sizes):.3g} elements, over {PARAMETERS_MAX:.3g}"
        ]
    count = len(sizes)
    budget, forward_s = CHECK_S, 0.0

    def fits(model, inputs) -> bool:
        """A forward per parameter and one more within ``budget``, in fp64 (half the rate, twice the bytes)."""
        cost = plan(model, inputs)
        return 2 * cost.forward_s() * (1 + count) <= budget and 2 * cost.intermediates <= MEMORY_BYTES

    for _ in range(2):  # the plan's rates, then an instance as much smaller as the forward timed says
        reduction = reduce_problem(problem, fits, batch_floor=SMALLEST_BATCH)
        if reduction.reason in (OVER_BUDGET, NOT_BUILT):
            return [], [f"cancelled parameters not checked: {reduction.reason}"]
        if any(s.reduced < min(SMALLEST_BATCH if s.batch else SMALLEST, s.full) for s in reduction.sizes):
            return [], [f"cancelled parameters not checked: {reduction.summary()} is too small to tell them"]
        with reduction.applied(problem):
            model = reference_model(problem, "cpu", 0, torch.float64)
            inputs = [
                x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                for x in problem.make_inputs(SEED, "cpu")
            ]
            started = time.perf_counter()
            before = _outputs(model, inputs)
            forward_s = time.perf_counter() - started
            if forward_s * (1 + count) <= TIME_S:
                cancelled, scale = _moved_parameters(model, inputs, before)
                break
        budget *= TIME_S / (forward_s * (1 + count)) / 2
    else:
        return [], [
            f"cancelled parameters not checked: a forward of the smallest instance took {forward_s:.2g} s in fp64"
        ]
    if not cancelled:
        return [], []
    users = sorted(set().union(*(g.param_users(n) for n in cancelled)), key=g.nodes.index)
    # an add an element where a user keeps parameters that matter; all of its work where none of its own does
    saved = sum(
        g.flops.get(n, 0.0) + _elements(g, n) if _own_parameters(g, n) <= set(cancelled) else _elements(g, n)
        for n in users
    )
    names = ", ".join(cancelled)
    where = f" ({node_names(users)})" if users else ""
    return [
        _lever(
            roof,
            "cancelled_parameters",
            f"Parameters that do not change the output: {names}",
            (
                f"each moved in turn by a random change at least as large as itself on {reduction.summary()}, in "
                f"fp64, the output moved by at most {max(cancelled.values()):.2g} (its largest magnitude "
                f"{scale:.3g}): what they add is removed downstream (a normalization or a mean subtraction after "
                "them) or never reaches the output (the forward never reads them, or what follows saturates on "
                "the problem's inputs)"
            ),
            f"Leave {names} out of the kernel: no load, and none of the work only they feed{where}.",
            users,
            saved,
            sum(g.param_bytes(n) for n in cancelled if g.param_users(n)),
            {"checked_on": "one input set (seed 7) on the CPU in fp64", "parameters": names},
        )
    ], []
