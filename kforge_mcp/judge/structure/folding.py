"""Reductions that fold into the op before them: fold_reduction (a sum or mean over a Linear's output) and
reduce_first (a sum or mean over a convolution's spatial dims)."""

from __future__ import annotations

from kforge_mcp.core.schemas import Lever, Roofline
from kforge_mcp.judge.structure.graph import (
    AFFINE,
    CONVS,
    LINEAR_POOLS,
    RESHAPES,
    SIZE_ONE_IDENTITIES,
    Graph,
    _dims,
    _lever,
    _si,
    identities_after,
    node_names,
    weight_side,
)


def _linear_operands(g: Graph, n):
    """(in_features, bias present) when ``n`` is a Linear on an input with a constant weight."""
    name = g.op(n)
    if name == "linear" and n.op == "call_module":
        mod = g.gm.get_submodule(n.target)
        return mod.weight.shape[1], mod.bias is not None
    args = list(n.args)
    if name == "linear":
        x, w = args[0], args[1]
        bias = len(args) > 2 and args[2] is not None or n.kwargs.get("bias") is not None
    elif name in ("matmul", "mm"):
        x, w, bias = args[0], args[1], False
    elif name == "addmm":
        x, w, bias = args[1], args[2], True
    else:
        return None
    if not hasattr(x, "op") or not hasattr(w, "op") or not g.from_input[x] or g.from_input[w]:
        return None
    ws = g.shape(w)
    if ws is None or len(ws) != 2:
        return None
    xs = g.shape(x)
    return (xs[-1], bias) if xs else None


def _per_feature(g: Graph, arg, width: int) -> bool:
    """A scalar, or a constant that varies along the last (feature) dim only."""
    if not hasattr(arg, "op"):
        return isinstance(arg, (int, float))
    if g.from_input[arg]:
        return False
    s = g.shape(arg) or ()
    return all(d == 1 for d in s[:-1]) and (not s or s[-1] in (1, width))


def fold_levers(g: Graph, roof: Roofline) -> list[Lever]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    levers = []
    for lin in g.nodes:
        ops = _linear_operands(g, lin) if lin.op in ("call_function", "call_method", "call_module") else None
        if ops is None:
            continue
        k, has_bias = ops
        out_shape = g.tensor_shape(lin)
        width, rows = out_shape[-1], int(torch.Size(out_shape[:-1]).numel())
        chain, cur, consts, affine, terminal = [lin], lin, [], False, None
        while len(cur.users) == 1:
            u = next(iter(cur.users))
            name, shape = g.op(u), g.shape(u)
            if name in AFFINE:
                if sum(a is cur for a in u.args) != 1:  # y * y is not linear in y
                    break
                others = [a for a in u.args if a is not cur]
                if name in ("div", "true_divide") and u.args[0] is not cur:
                    break
                if not all(_per_feature(g, a, width) for a in others):
                    break
                consts += [a for a in others if hasattr(a, "op")]
                affine = affine or name in ("add", "sub")
            elif name in RESHAPES:
                if not shape or shape[-1] != width:
                    break
            elif name in ("sum", "mean") or (name in LINEAR_POOLS and shape and len(shape) == 3):
                terminal = u
            else:
                break
            chain.append(u)
            cur = u
            if terminal is not None:
                break
        if terminal is None:
            continue
        name = g.op(terminal)
        in_shape = g.tensor_shape(terminal.args[0])
        dims = _dims(terminal, len(in_shape)) if name in ("sum", "mean") else [len(in_shape) - 1]
        if dims == []:
            continue  # dims not known as integers
        over_features = dims is None or len(in_shape) - 1 in dims
        if dims is None or over_features:
            groups = 1 if name in ("sum", "mean") else g.tensor_shape(terminal)[-1]
            after_rows, after_out = rows, groups
        else:
            kept = [s for i, s in enumerate(in_shape[:-1]) if i not in dims]
            after_rows, after_out = int(torch.Size(kept).numel()), width
        with torch.device("meta"), FlopCounterMode(display=False) as counter:
            torch.empty(after_rows, k) @ torch.empty(k, after_out)
        flops_before = sum(g.flops[c] for c in chain)
        flops_after = roof.flops - flops_before + float(counter.get_total_flops())
        owned = {p for c in [lin, *consts] for p in g.params[c]}
        chain_set = set(chain) | weight_side(g, [lin, *consts])
        gone = [p for p in owned if g.param_users(p) <= chain_set]
        esize = g.value[lin].element_size()
        if over_features:
            new_bytes = (after_out * k + (after_out if has_bias or affine or consts else 0)) * esize
            bytes_saved = sum(g.param_bytes(p) for p in gone) - new_bytes
        else:
            bytes_saved = 0.0  # the same weight, the same input: only the FLOPs shrink
        bytes_after = roof.bytes - max(bytes_saved, 0.0)
        steps = " -> ".join(g.op(c) for c in chain)
        tail = identities_after(g, terminal)
        if tail:
            steps += f"; then {', '.join(g.op(t) for t in tail if g.op(t) in SIZE_ONE_IDENTITIES)} over a dim of size 1"
            chain += tail
        if over_features:
            what = "a GEMV" if groups == 1 else f"a Linear with {groups} outputs"
            detail = (
                f"{steps}: the {name} over the Linear's {width} output features is linear in them, so "
                f"sum_j (W x + b)_j = (sum_j W_j) x + sum_j b_j: the [{rows} x {k}] x [{k} x {width}] GEMM becomes "
                f"{what} with a weight pre-reduced to [{groups} x {k}]"
                + (
                    " (the per-feature steps between them fold into it)"
                    if any(g.op(c) in AFFINE for c in chain)
                    else ""
                )
            )
            action = (
                f"Pre-reduce the weight (and bias) over the output features once per weight version, "
                f"caching it keyed on the parameters' _version, and compute {what}: [{rows} x {k}] x [{k} x {groups}]."
                + (" What follows the reduction over a dim of size 1 is the identity: skip it." if tail else "")
            )
        else:
            detail = (
                f"{steps}: the {name} over the rows is linear, sum_i (W x_i + b) = W (sum_i x_i) + n b: "
                f"reduce the input's {rows} rows to {after_rows} first and the GEMM becomes a GEMV"
            )
            action = f"Sum the input over the reduced rows first, then apply the Linear to {after_rows} row(s)."
        levers.append(
            _lever(
                roof,
                "fold_reduction",
                f"Fold the {name} into the Linear ({node_names(chain)})",
                detail,
                action,
                chain,
                roof.flops - flops_after,
                roof.bytes - bytes_after,
                {"gemm": f"{rows}x{k}x{width}", "after": f"{after_rows}x{k}x{after_out}"},
            )
        )
    return levers


def _per_channel(g: Graph, arg, channels: int, ndim: int) -> bool:
    """A scalar, or a constant that varies along the channel dim (1) only, as a per-channel bias or scale."""
    if not hasattr(arg, "op"):
        return isinstance(arg, (int, float))
    if g.from_input[arg]:
        return False
    s = (1,) * (ndim - len(g.shape(arg) or ())) + tuple(g.shape(arg) or ())
    return all(d == 1 for i, d in enumerate(s) if i != 1) and s[1] in (1, channels)


def _conv_extents(g: Graph, n) -> list[int] | None:
    """The spatial extents a convolution node's FLOPs run over: its output's for a direct one, its input's for a
    transposed one (each input pixel meets every tap once); None for any other node."""
    name = g.op(n)
    if name not in CONVS:
        return None
    transposed = "transpose" in name or (name == "convolution" and bool(n.args[6] if len(n.args) > 6 else False))
    src = g.shape(n.args[0]) if n.args and hasattr(n.args[0], "op") else None
    out = g.shape(n)
    if not src or not out:
        return None
    return list(src[2:] if transposed else out[2:])


def reduce_first_levers(g: Graph, roof: Roofline) -> list[Lever]:
    """A sum or mean over spatial dims of a convolution's output, through per-channel affine steps only: reduce the
    convolution's input over those dims first (one partial sum per kernel tap along each) and convolve in fewer
    dims; its FLOPs shrink by the extent reduced, its input is still read once."""
    levers = []
    for conv in g.nodes:
        extents = _conv_extents(g, conv) if conv.op in ("call_function", "call_method", "call_module") else None
        if extents is None or not g.from_input[conv]:
            continue
        shape = g.tensor_shape(conv)
        chain, cur, terminal = [conv], conv, None
        while len(cur.users) == 1 and terminal is None:
            u = next(iter(cur.users))
            name = g.op(u)
            if name in AFFINE:
                others = [a for a in u.args if a is not cur]
                if sum(a is cur for a in u.args) != 1 or (name in ("div", "true_divide") and u.args[0] is not cur):
                    break
                if not all(_per_channel(g, a, shape[1], len(shape)) for a in others):
                    break
            elif name in ("sum", "mean"):
                terminal = u
            else:
                break
            chain.append(u)
            cur = u
        if terminal is None:
            continue
        dims = _dims(terminal, len(shape))
        spatial = [d for d in (range(len(shape)) if dims is None else dims) if d >= 2]
        factor = 1
        for d in spatial:
            factor *= extents[d - 2]
        if factor <= 1:
            continue
        conv_flops = g.flops[conv]
        after = conv_flops / factor
        names = ", ".join(str(d) for d in spatial)
        left = len(shape) - 2 - len(spatial)
        how = f"a {left}-D convolution" if left else "a product per kernel tap (no spatial dims left)"
        reduction = g.op(terminal)
        levers.append(
            _lever(
                roof,
                "reduce_first",
                f"Reduce before the convolution: the {reduction} over dim(s) {names} of {conv.name}'s output is "
                "linear in its input",
                f"{' -> '.join(g.op(c) for c in chain)}: a {reduction} over dim(s) {names} of a convolution's output "
                f"(through per-channel steps) equals the kernel's taps along those dims applied to its input summed "
                f"over them (less the slices the border drops): {_si(conv_flops)} FLOPs become {_si(after)}, "
                f"{how} on the reduced input",
                f"Sum the convolution's input over dim(s) {names} first, one partial sum per kernel tap along each "
                "(the full sum less the border slices that tap never reaches), then compute "
                f"{how} of those sums with the weights of each tap; apply the per-channel steps after.",
                chain,
                conv_flops - after,
                0.0,
                {"convolution_flops": conv_flops, "reduced_extent": factor, "dims": names},
            )
        )
    return levers
