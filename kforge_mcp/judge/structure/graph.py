"""The reference's FX graph: each node's op, FLOPs, shape and bytes, what it depends on, and a lever priced on
the roofline."""

from __future__ import annotations

import operator
from typing import Any

from kforge_mcp.core.schemas import Lever, Roofline
from kforge_mcp.judge.roofline import lever_sol_ms

_MODULES = {
    "Linear": "linear",
    "AvgPool1d": "avg_pool1d",
    "AdaptiveAvgPool1d": "adaptive_avg_pool1d",
    "Identity": "identity",
}


_OPERATORS = {
    operator.add: "add",
    operator.iadd: "add",
    operator.sub: "sub",
    operator.isub: "sub",
    operator.mul: "mul",
    operator.imul: "mul",
    operator.truediv: "div",
    operator.itruediv: "div",
    operator.neg: "neg",
    operator.matmul: "matmul",
    operator.getitem: "getitem",
}


AFFINE = {"add", "sub", "mul", "div", "true_divide", "neg", "identity", "clone", "contiguous"}


RESHAPES = {"unsqueeze", "squeeze", "view", "reshape", "flatten", "_unsafe_view"}


LINEAR_POOLS = {"avg_pool1d", "adaptive_avg_pool1d"}


VIEWS = RESHAPES | {
    "t",
    "T",
    "mT",
    "numpy_T",
    "transpose",
    "permute",
    "expand",
    "getitem",
    "split",
    "chunk",
    "unbind",
    "narrow",
    "select",
    "slice",
    "detach",
    "alias",
    "getattr",
    "size",
}


SIZE_ONE_IDENTITIES = {"max", "amax", "min", "amin", "mean", "sum", "logsumexp"}


HEAVY = {"linear", "matmul", "mm", "addmm", "bmm", "conv1d", "conv2d", "conv3d", "convolution"}


CONVS = {
    *(f"conv{d}d" for d in (1, 2, 3)),
    *(f"convtranspose{d}d" for d in (1, 2, 3)),  # nn.ConvTranspose*d modules
    *(f"conv_transpose{d}d" for d in (1, 2, 3)),  # torch.conv_transpose*d and F.conv_transpose*d
    "convolution",
}


class Graph:
    """The traced reference: per node its op, FLOPs, output shape and bytes, and what it depends on."""

    def __init__(self, gm, how: str, inputs: list):
        import torch
        from torch.utils.flop_counter import FlopCounterMode

        self.gm, self.how = gm, how
        self.nodes = list(gm.graph.nodes)
        self.flops: dict[Any, float] = {}
        self.value: dict[Any, Any] = {}
        graph = self

        class Recorder(torch.fx.Interpreter):
            def run_node(self, n):
                with FlopCounterMode(display=False) as counter:
                    out = super().run_node(n)
                graph.flops[n] = float(counter.get_total_flops())
                graph.value[n] = out
                return out

        with torch.no_grad():
            Recorder(gm).run(*inputs)
        self.from_input: dict[Any, bool] = {}
        self.params: dict[Any, set] = {}
        for n in self.nodes:
            ups = n.all_input_nodes
            self.from_input[n] = n.op == "placeholder" or any(self.from_input[a] for a in ups)
            own = {n.target} if n.op == "get_attr" else set()
            if n.op == "call_module":
                own = {f"{n.target}.{p}" for p, _ in gm.get_submodule(n.target).named_parameters()}
            self.params[n] = own.union(*(self.params[a] for a in ups))

    def op(self, n) -> str:
        import torch

        if n.op == "call_module":
            t = type(self.gm.get_submodule(n.target)).__name__
            return _MODULES.get(t, t.lower())
        if n.op == "call_method":
            return n.target
        if n.op == "call_function":
            t = n.target
            if isinstance(t, torch._ops.OpOverload):
                return t._schema.name.split("::")[-1]
            if t is getattr:
                return str(n.args[1])
            return str(_OPERATORS.get(t) or getattr(t, "__name__", str(t)))
        return n.op

    def shape(self, n) -> tuple | None:
        v: Any = self.value.get(n)
        return tuple(v.shape) if hasattr(v, "shape") else None

    def tensor_shape(self, n) -> tuple:
        """The shape of a node known to hold a tensor (the linear chain's nodes do)."""
        shape = self.shape(n)
        if shape is None:
            raise ValueError(f"{n} holds no tensor")
        return shape

    def nbytes(self, n) -> float:
        v: Any = self.value.get(n)
        return float(v.numel() * v.element_size()) if hasattr(v, "element_size") else 0.0

    def param_bytes(self, name: str) -> float:
        t = self.gm.get_parameter(name) if _has(self.gm.get_parameter, name) else self.gm.get_buffer(name)
        return float(t.numel() * t.element_size())

    def param_users(self, name: str) -> set:
        """Nodes that read the parameter: its get_attr's users, or the module that owns it."""
        out = set()
        for n in self.nodes:
            if n.op == "get_attr" and n.target == name:
                out |= set(n.users)
            elif n.op == "call_module" and name.startswith(f"{n.target}."):
                out.add(n)
        return out

    def weight_only(self, n) -> bool:
        return not self.from_input[n] and n.op in ("call_function", "call_method", "call_module")


def _has(getter, name) -> bool:
    try:
        getter(name)
        return True
    except AttributeError:
        return False


def trace(model, inputs: list):
    """(GraphModule, how): symbolic_trace first, torch.export where Python control flow defeats it."""
    import torch

    try:
        return torch.fx.symbolic_trace(model), "torch.fx.symbolic_trace"
    except Exception as first:  # noqa: BLE001
        try:
            return torch.export.export(model, tuple(inputs)).module(), "torch.export"
        except Exception as e:  # noqa: BLE001
            raise RuntimeError(
                f"the reference could not be traced: symbolic_trace: {first}; torch.export: {type(e).__name__}: {e}"
            ) from None


def _dims(n, ndim: int) -> list[int] | None:
    """The reduced dims of a sum or mean, non-negative; None: all of them."""
    dim = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else None)
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return None
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return sorted(d % ndim for d in dims if isinstance(d, int))


def _si(x: float) -> str:
    return f"{x:.3g}"


def weight_side(g: Graph, nodes) -> set:
    """The nodes that compute from parameters alone and feed ``nodes`` (a weight's transpose, a scale)."""
    out, stack = set(), list(nodes)
    while stack:
        for a in stack.pop().all_input_nodes:
            if not g.from_input[a] and a not in out:
                out.add(a)
                stack.append(a)
    return out


def identities_after(g: Graph, node) -> list:
    """Reductions over dims of size 1 that follow ``node`` (max, mean, logsumexp of one element): identities."""
    out: list = []
    cur = node
    while len(cur.users) == 1:
        u = next(iter(cur.users))
        name, src = g.op(u), g.shape(cur)
        if name in ("getitem", "values") and out and g.op(cur) in ("max", "min"):
            pass  # (values, indices)[0] of the max before it
        elif name not in SIZE_ONE_IDENTITIES or not src:
            break
        else:
            dims = _dims(u, len(src))
            dims = list(range(len(src))) if dims is None else dims
            if not dims or any(src[d] != 1 for d in dims):
                break
        out.append(u)
        cur = u
    return out


def node_names(nodes) -> str:
    names = [n.name for n in nodes]
    return ", ".join(names) if len(names) <= 4 else f"{names[0]} ... {names[-1]}"


def _lever(roof: Roofline, kind, title, detail, action, nodes, flops_saved, bytes_saved, evidence) -> Lever:
    flops_after, bytes_after = max(roof.flops - flops_saved, 0.0), max(roof.bytes - bytes_saved, 0.0)
    sol = lever_sol_ms(roof, flops_after, bytes_after)
    return Lever(
        kind=kind,
        title=title,
        detail=detail,
        action=action,
        nodes=[n.name for n in nodes],
        flops_saved=flops_saved,
        bytes_saved=bytes_saved,
        flops_after=flops_after,
        bytes_after=bytes_after,
        sol_ms_after=sol,
        evidence=evidence,
    )
