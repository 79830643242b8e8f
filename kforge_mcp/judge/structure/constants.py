"""constant_output and dead_work: nodes that do not change with the inputs on two input sets, and the work that
feeds only them."""

from __future__ import annotations

from kforge_mcp.core.schemas import Lever, Roofline
from kforge_mcp.judge.structure.graph import Graph, _lever, trace

# The constant check runs the reference twice for real; on a CPU worker only when a forward is estimated
# (FLOPs and intermediate bytes at rates a shared 2-core worker sustains, conservatively) under this.
VALUE_CHECK_MAX_S = {"cpu": 2.0}


# FLOP/s by op (a transposed 3-D convolution ran at ~0.1 GFLOP/s on a 2-core worker, a GEMM at ~30) and bytes/s
CPU_FLOP_RATES = (("transpose", 1e8), ("conv", 1e9), ("", 1e10))


CPU_BYTE_RATE = 2e9


def _fingerprint(v):
    import torch

    if not isinstance(v, torch.Tensor) or not v.numel() or not v.is_floating_point():
        return None
    flat = v.detach().reshape(-1)
    total, size = flat.sum(dtype=torch.float64), flat.abs().sum(dtype=torch.float64)
    return (tuple(v.shape), float(total), float(size), float(flat[0]), float(flat[-1]))


def _values(gm, inputs) -> tuple[dict, object]:
    """Each node's fingerprint (shape, sum, |sum|, first, last) and whether it is constant, and the output."""
    import torch

    seen = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            fp = _fingerprint(out)
            if fp is not None:
                seen[n.name] = (fp, bool((out == out.reshape(-1)[0]).all()), float(out.reshape(-1)[0]))
            return out

    with torch.no_grad():
        out = Recorder(gm).run(*inputs)
    return seen, out


def _two_runs(problem, device: str) -> tuple[dict, object, dict, object]:
    """Each node's fingerprints and the output, on two input sets drawn on the device (any two draws tell a
    constant; a host draw of a 537 MB input took 0.7 s)."""
    from kforge_mcp.core.problem import reference_model

    model = reference_model(problem, device)  # as verify builds it (train mode, as KernelBench runs it)
    inputs = problem.make_inputs(7, device, on_device=True)
    gm, _ = trace(model, inputs)
    first, out1 = _values(gm, inputs)
    del inputs
    second, out2 = _values(gm, problem.make_inputs(8, device, on_device=True))
    return first, out1, second, out2


def constant_levers(g: Graph, roof: Roofline, problem, device: str) -> tuple[list[Lever], list[str]]:
    """Nodes that depend on the inputs yet do not change with them on two input sets, and the work only they need."""
    from kforge_mcp.judge.guards import degenerate_findings

    cap = VALUE_CHECK_MAX_S.get(device)
    inter = sum(g.nbytes(n) for n in g.nodes)
    rate = {n: next(r for k, r in CPU_FLOP_RATES if k in g.op(n).lower()) for n in g.nodes}
    estimate = sum(g.flops[n] / rate[n] for n in g.nodes if n in g.flops) + inter / CPU_BYTE_RATE
    if cap is not None and estimate > cap:
        return [], [
            f"constant outputs not checked: a forward ({roof.flops:.3g} FLOPs, {inter:.3g} bytes of intermediates) "
            f"is estimated at {estimate:.0f} s on {device}, too long to run twice here; a profile on the GPU checks them"
        ]
    first, out1, second, out2 = _two_runs(problem, device)
    finding = next(iter(degenerate_findings(out1, out2)), None)
    by_name = {n.name: n for n in g.nodes}
    frozen = {
        by_name[name]
        for name, (fp, _, _) in first.items()
        if name in by_name
        and g.from_input[by_name[name]]
        and by_name[name].op not in ("placeholder", "output")
        and name in second
        and second[name][0] == fp
    }
    if not frozen:
        return [], []
    starts = [n for n in frozen if not any(a in frozen for a in n.all_input_nodes)]
    dead = set(frozen)
    for n in reversed(g.nodes):
        if n.op in ("call_function", "call_method", "call_module") and n.users and all(u in dead for u in n.users):
            dead.add(n)
    output = next(n for n in g.nodes if n.op == "output")
    live = [n for n in g.nodes if n not in dead and n is not output]
    flops_saved = sum(g.flops.get(n, 0.0) for n in dead)
    unread = [n for n in g.nodes if n.op == "placeholder" and all(u in dead for u in n.users)]
    params = {p for n in dead for p in g.params[n]}
    bytes_saved = sum(g.nbytes(n) for n in unread) + sum(
        g.param_bytes(p) for p in params if g.param_users(p) <= dead | {n for n in g.nodes if not g.from_input[n]}
    )
    where = ", ".join(
        f"{n.name} ({g.op(n)}{' = ' + format(first[n.name][2], 'g') if first[n.name][1] else ''})" for n in starts[:4]
    )
    if finding is not None or not any(n in live for n in output.all_input_nodes):
        kind, title = "constant_output", "The output does not depend on the inputs"
        detail = (
            f"{finding.message if finding else 'the output does not change with the inputs'} (verify reports "
            f"degenerate_problem); it becomes so at {where}"
        )
        action = (
            "Check the math at that node for every input of these shapes (a mean over a dim of size 1, a "
            "softmax over one element): where it holds, the kernel writes the constant and skips the rest."
        )
    else:
        kind, title = "dead_work", f"Work that only feeds an input-independent value ({where})"
        detail = (
            f"{where} did not change between two input sets, so the {len(dead)} node(s) feeding only it are dead work"
        )
        action = (
            "Check the math at that node; where it holds for all inputs, replace it by its value and drop its inputs."
        )
        if not flops_saved and not bytes_saved:
            return [], []  # a value made from a shape alone (torch.ones(x.shape[0])): nothing to save
    return [
        _lever(
            roof,
            kind,
            title,
            detail,
            action,
            sorted(dead, key=g.nodes.index),
            flops_saved,
            bytes_saved,
            {"checked_on": "two input sets (seeds 7 and 8) on " + device},
        )
    ], []
