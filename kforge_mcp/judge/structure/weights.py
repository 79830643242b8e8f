"""weight_once: work on parameters alone, and the weights' conversion for the bound's path, done once per
weight version."""

from __future__ import annotations

from kforge_mcp.core.schemas import Lever, Roofline
from kforge_mcp.judge.roofline.paths import dtype_bytes
from kforge_mcp.judge.structure.graph import HEAVY, VIEWS, Graph, _lever


def weight_levers(g: Graph, roof: Roofline) -> list[Lever]:
    """Work on parameters alone, and the weights of heavy ops when the compute path converts them."""
    levers = []
    work = [n for n in g.nodes if g.weight_only(n) and g.op(n) not in VIEWS and g.params[n]]
    if work:
        frontier = [n for n in work if any(g.from_input[u] for u in n.users)] or work
        params = sorted(set().union(*(g.params[n] for n in work)))
        only_here = [p for p in params if all(not g.from_input[u] for u in g.param_users(p))]
        saved = sum(g.param_bytes(p) for p in only_here) - sum(g.nbytes(n) for n in frontier)
        redo = sum(g.nbytes(n) + sum(g.nbytes(a) for a in n.all_input_nodes) for n in work)
        ops = ", ".join(n.name if n.name.startswith(g.op(n)) else f"{n.name} ({g.op(n)})" for n in work[:6])
        levers.append(
            _lever(
                roof,
                "weight_once",
                f"Transform the weights once per version, not every forward ({ops})",
                f"{ops} read only parameters ({', '.join(params)}): their result is the same every forward "
                f"until a parameter changes. A forward that redoes it moves {redo:.4g} bytes more than it must "
                f"and launches {len(work)} more op(s); in the roofline's terms it saves "
                f"{sum(g.flops[n] for n in work):.4g} FLOPs and {saved:.4g} bytes",
                "Compute the transformed weight once and cache it keyed on each parameter's _version (and "
                "data_ptr), recomputing when either changes; the forward then reads the cached tensor only.",
                work,
                sum(g.flops[n] for n in work),
                saved,
                {"bytes_per_forward_if_redone": redo, "parameters": ", ".join(params)},
            )
        )
    convert = convert_lever(roof, *heavy_weights(g))
    return levers + ([convert] if convert else [])


def heavy_weights(g: Graph) -> tuple[list[str], float]:
    """The parameters heavy ops (GEMMs, convolutions) take as weights, and their bytes."""
    weights = {}
    for n in g.nodes:
        if g.op(n) in HEAVY and g.from_input[n]:
            for a in n.all_input_nodes:
                if not g.from_input[a]:
                    weights.update({p: g.param_bytes(p) for p in g.params[a]})
            if n.op == "call_module":
                weights.update({p: g.param_bytes(p) for p in g.params[n] if p.endswith("weight")})
    weights = {p: b for p, b in weights.items() if p.endswith("weight") or len(weights) == 1}
    return sorted(weights), sum(weights.values())


def operand_bytes(path: str) -> int | None:
    """Bytes a weight element takes converted (and split into parts) for ``path``; None where there is no
    conversion worth keeping (TF32 and 3xTF32 convert in registers, at no byte cost)."""
    from kforge_mcp.judge.precision_paths import PATH_SPECS

    spec = PATH_SPECS.get(path)
    if spec is None:
        return None
    size = {"fp8": 1, "fp16": 2, "bf16": 2}.get(spec.base)
    return size * max(spec.parts) if size else None


def convert_lever(roof: Roofline, names: list[str], total: float) -> Lever | None:
    """The weights' conversion (split) for the bound's path, done once per weight version."""
    part = operand_bytes(roof.path)
    if part is None or roof.path == roof.dtype or not names:
        return None
    esize = dtype_bytes(roof.dtype)
    converted = total / esize * part
    listed = ", ".join(names)
    return _lever(
        roof,
        "weight_once",
        f"Convert the weights for the {roof.path} path once per version, not every forward",
        f"the bound assumes the {roof.path} path; its weight operands ({listed}, {total:.4g} bytes in "
        f"{roof.dtype}) are parameters, so their conversion"
        + (" and split into parts" if "x" in roof.path else "")
        + f" ({part} bytes an element) is the same every forward. A separate conversion kernel per forward "
        f"moves {total + converted:.4g} bytes more and launches once more; cached, the forward reads "
        f"{converted:.4g} bytes of weight instead of {total:.4g}",
        f"Convert (split) {listed} for {roof.path} once and cache the result keyed on each parameter's "
        "_version; never in a kernel of its own every forward, and never fused into a GEMM that is busy already.",
        [],
        0.0,
        max(total - converted, 0.0),
        {
            "weights": listed,
            "weight_bytes": total,
            "converted_bytes": converted,
            "bytes_per_forward_if_redone": total + converted,
        },
    )
