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
    special_functions: float = 0.0  # special-function evaluations (SPECIAL_FUNCTIONS), elements x weight
    logs_by_op: dict[str, float] = field(default_factory=dict)  # elements through each op of LOG_OPS


def _op_family(op) -> str:
    name = str(op)
    if "conv" in name:
        return "convolution"
    if "attention" in name or "sdpa" in name:
        return "attention"
    return "matmul"  # FlopCounterMode's other ops are mm, addmm, bmm, baddbmm, _scaled_mm, ...


# Special-function evaluations an element of each op's output costs where a kernel computes it with the hardware's
# approximations (an exp2, a log2, a reciprocal each): tanh as exp and a division, softplus as exp and log, mish as
# softplus and tanh, softmax as exp and a division. What a fused epilogue spends on the unit that also converts
# types; erf and polynomial GELUs run on the FMA pipe.
SPECIAL_FUNCTIONS = {
    "exp": 1,
    "exp2": 1,
    "expm1": 1,
    "log": 1,
    "log2": 1,
    "log1p": 1,
    "reciprocal": 1,
    "rsqrt": 1,
    "sqrt": 1,
    "sin": 1,
    "cos": 1,
    "tanh": 2,
    "sigmoid": 2,
    "softplus": 2,
    "silu": 2,
    "elu": 1,
    "selu": 1,
    "mish": 4,
    "_softmax": 2,
    "_log_softmax": 2,
    "log_sigmoid_forward": 2,
    "div": 1,
    "pow": 2,
}

# Ops whose exact form takes a logarithm of every element: a compiler's log is a polynomial of ~25-40 instructions
# where the hardware's log2 is one (bench/epilogue_math.py), and mish needs no log at all. log_softmax and logsumexp
# take one log a row, not an element.
LOG_OPS = frozenset({"mish", "softplus", "log", "log1p", "log2", "log10", "log_sigmoid_forward"})


def _conv_recorder():
    """A dispatch mode that records each convolution's geometry (what FlopCounterMode's total does not keep) and
    counts the special-function evaluations of the ops that need them."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    ops = {aten.convolution, aten._convolution}

    class Recorder(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.convs: list[Convolution] = []
            self.special_functions = 0.0
            self.logs_by_op: dict[str, float] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket in ops:
                names = [a.name for a in func._schema.arguments]
                self.convs.append(convolution({**dict(zip(names, args, strict=False)), **(kwargs or {})}, out))
            name = func.overloadpacket.__name__.removesuffix("_")  # tanh_ as tanh
            weight = SPECIAL_FUNCTIONS.get(name, 0)
            if weight or name in LOG_OPS:
                elements = sum(t.numel() for t in _tensors(out))
                if name in LOG_OPS:
                    self.logs_by_op[name] = self.logs_by_op.get(name, 0.0) + elements
                if weight and not (func.overloadpacket is aten.div and not isinstance(args[1], torch.Tensor)):
                    self.special_functions += weight * elements  # a scalar divisor: a mul
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
    return Counts(
        flops, nbytes, dtype, out_bytes, tuple(recorder.convs), by_op, recorder.special_functions, recorder.logs_by_op
    )


def meta_reference(problem) -> tuple:
    """The reference model and its inputs on the meta device (no memory, no compute): what counting and
    tracing the reference run on. Raises where the model cannot be built there (data-dependent code)."""
    import torch

    from kforge_mcp.core.problem import seed_everything

    init = problem.init_inputs("cpu")
    with torch.device("meta"):
        seed_everything(0)
        model = problem.module.Model(*init)
    return model, problem.meta_inputs()


def count_problem(problem, device: str = "cpu") -> Counts:
    """The reference's counts, on the meta device when it allows, else on ``device``."""
    from kforge_mcp.core.problem import seed_everything

    try:
        return count_reference(*meta_reference(problem))
    except Exception:  # noqa: BLE001  (data-dependent models cannot run on meta: run it for real)
        seed_everything(0)
        model = problem.module.Model(*problem.init_inputs(device)).to(device)
        return count_reference(model, problem.make_inputs(7, device))
