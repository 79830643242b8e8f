"""Counting a reference forward, inside a worker: FLOPs from torch's FlopCounterMode (by op family, and each
convolution's geometry), minimum bytes (inputs and parameters read once, outputs written once), the dominant dtype.
FlopCounterMode counts matmul, convolution and attention FLOPs only: element-wise ops and reductions count 0."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kforge_mcp.core.schemas import Convolution
from kforge_mcp.judge.roofline.paths import dtype_key


def _tensors(value):
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


@dataclass(frozen=True)
class Counts:
    flops: float
    bytes: float  # inputs and parameters read once, outputs written once
    dtype: str
    out_bytes: float  # the outputs alone
    convs: tuple[Convolution, ...] = ()
    flops_by_op: dict[str, float] = field(default_factory=dict)


def _op_family(op) -> str:
    name = str(op)
    if "conv" in name:
        return "convolution"
    if "attention" in name or "sdpa" in name:
        return "attention"
    return "matmul"  # FlopCounterMode's other ops are mm, addmm, bmm, baddbmm, _scaled_mm, ...


def _conv_recorder():
    """A dispatch mode that records each convolution's geometry (what FlopCounterMode's total does not keep)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    ops = {aten.convolution, aten._convolution}

    class Recorder(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.convs: list[Convolution] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket in ops:
                names = [a.name for a in func._schema.arguments]
                self.convs.append(convolution({**dict(zip(names, args, strict=False)), **(kwargs or {})}, out))
            return out

    return Recorder()


def convolution(a: dict, out) -> Convolution:
    """A Convolution from aten.convolution's arguments and output; FLOPs as FlopCounterMode counts them."""
    x, w, transposed = a["input"], a["weight"], bool(a["transposed"])
    dims = w.dim() - 2

    def per_dim(v) -> list[int]:
        v = [int(i) for i in v]
        return v * dims if len(v) == 1 else v

    counted_on = x.shape[2:] if transposed else out.shape[2:]
    return Convolution(
        op=f"conv{'_transpose' if transposed else ''}{dims}d",
        transposed=transposed,
        batch=int(x.shape[0]),
        c_in=int(x.shape[1]),
        c_out=int(out.shape[1]),
        groups=int(a["groups"]),
        kernel=[int(k) for k in w.shape[2:]],
        stride=per_dim(a["stride"]),
        padding=per_dim(a["padding"]),
        dilation=per_dim(a["dilation"]),
        in_spatial=[int(i) for i in x.shape[2:]],
        out_spatial=[int(o) for o in out.shape[2:]],
        flops=2.0 * x.shape[0] * math.prod(w.shape) * math.prod(counted_on),
    )


def count_reference(model, inputs: list) -> Counts:
    """FLOPs (by op, and each convolution's geometry), minimum bytes, dominant dtype key and output bytes of one
    forward of ``model`` on ``inputs``."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    recorder = _conv_recorder()
    with torch.no_grad():
        counter = FlopCounterMode(display=False)
        with counter, recorder:
            out = model(*inputs)
    flops = float(counter.get_total_flops())
    by_op: dict[str, float] = {}
    for op, n in counter.get_flop_counts().get("Global", {}).items():
        if n:
            by_op[_op_family(op)] = by_op.get(_op_family(op), 0.0) + float(n)
    read = list(_tensors(inputs)) + list(model.parameters()) + list(model.buffers())
    outputs = list(_tensors(out))
    seen, nbytes, out_bytes = set(), 0.0, 0.0
    by_dtype: dict[torch.dtype, float] = {}
    for i, t in enumerate(read + outputs):
        key = (t.data_ptr(), t.numel(), t.dtype) if t.device.type != "meta" else id(t)
        size = float(t.numel() * t.element_size())
        if i >= len(read):
            out_bytes += size
        if key in seen:
            continue
        seen.add(key)
        nbytes += size
        if t.is_floating_point():
            by_dtype[t.dtype] = by_dtype.get(t.dtype, 0.0) + size
    dtype = dtype_key(max(by_dtype, key=lambda d: by_dtype[d])) if by_dtype else "fp32"
    return Counts(flops, nbytes, dtype, out_bytes, tuple(recorder.convs), by_op)


def meta_reference(problem) -> tuple:
    """The reference model and its inputs on the meta device (no memory, no compute): what counting and
    tracing the reference run on. Raises where the model cannot be built there (data-dependent code)."""
    import torch

    from kforge_mcp.core.problem import seed_everything

    init = problem.init_inputs("cpu")
    with torch.device("meta"):
        seed_everything(0)
        model = problem.module.Model(*init)
    inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in problem.make_inputs(7, "cpu")]
    return model, inputs


def count_problem(problem, device: str = "cpu") -> Counts:
    """The reference's counts, on the meta device when it allows, else on ``device``."""
    from kforge_mcp.core.problem import seed_everything

    try:
        return count_reference(*meta_reference(problem))
    except Exception:  # noqa: BLE001  (data-dependent models cannot run on meta: run it for real)
        seed_everything(0)
        model = problem.module.Model(*problem.init_inputs(device)).to(device)
        return count_reference(model, problem.make_inputs(7, device))
