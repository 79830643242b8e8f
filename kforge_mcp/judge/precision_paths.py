"""Compute paths measured on the problem. The reference runs on the CPU with its matrix products and
convolutions done the way each path does them (operands rounded to the path's format, or split into
parts whose products are summed in fp32, as a tensor core accumulates), on the problem's own inputs.
Each path's max error, as a fraction of the tolerance verify applies (|a - b| <= atol + rtol |b|),
says whether a kernel on that path can pass. This measures numerics, not speed: the rate of a path is
its format's peak over its number of products (roofline/paths.py). The bound uses the fastest path whose
max error stays within MARGIN of the tolerance.

Splits: x = hi + lo with hi = round(x), lo = round(x - hi) (and a third part for bf16x6).
bf16x3 sums hi*hi + hi*lo + lo*hi, 3xtf32 the same in TF32 (CUTLASS's 3xTF32), bf16x6 splits in
three (hi + mid + lo) and sums hi*hi, hi*mid, mid*hi, mid*mid, hi*lo and lo*hi (Triton's
input_precision='bf16x6'); bf16x2 and fp16x2
split one operand only (hi*b + lo*b, after Markidis et al.'s refinement of one side), the one whose
rounding loses more. fp8 is e4m3 with a power-of-two per-tensor scale. fp32 is the FMA pipe: each
product computed in fp64 and rounded once to fp32, an ideal fp32 kernel.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from kforge_mcp.core.requests import RooflineRequest
from kforge_mcp.core.schemas import Convolution, Lever

# A path passes when its max error is at most this fraction of the tolerance: verify draws fresh inputs for
# every trial and the GPU sums in another order, so a path at 0.9 of the tolerance here can fail there.
MARGIN = 0.5
SEEDS = (1, 2)  # input sets measured; the weights are drawn under seed 0


@dataclass(frozen=True)
class PathSpec:
    name: str
    base: str  # the format whose tensor-core (or FMA) peak the products run at
    parts: tuple[int, int]  # parts the two operands split into: (2, 1) splits one side only
    terms: tuple[tuple[int, int], ...]  # products summed, smallest first: (part of a, part of b)
    how: str


PATH_SPECS = {
    s.name: s
    for s in (
        PathSpec("fp8", "fp8", (1, 1), ((0, 0),), "e4m3 operands, per-tensor scale"),
        PathSpec("fp16", "fp16", (1, 1), ((0, 0),), "fp16 operands"),
        PathSpec("bf16", "bf16", (1, 1), ((0, 0),), "bf16 operands"),
        PathSpec("tf32", "tf32", (1, 1), ((0, 0),), "TF32 operands (10-bit mantissa)"),
        PathSpec("fp16x2", "fp16", (2, 1), ((1, 0), (0, 0)), "one operand split in two fp16 parts: hi*b + lo*b"),
        PathSpec("bf16x2", "bf16", (2, 1), ((1, 0), (0, 0)), "one operand split in two bf16 parts: hi*b + lo*b"),
        PathSpec("bf16x3", "bf16", (2, 2), ((1, 0), (0, 1), (0, 0)), "bf16 hi + lo: hi*hi + hi*lo + lo*hi"),
        PathSpec(
            "3xtf32", "tf32", (2, 2), ((1, 0), (0, 1), (0, 0)), "TF32 big + small: big*big + big*small + small*big"
        ),
        PathSpec(
            "bf16x6",
            "bf16",
            (3, 3),
            ((2, 0), (0, 2), (1, 1), (1, 0), (0, 1), (0, 0)),
            "bf16 hi + mid + lo: the six products down to 2^-16 of hi*hi",
        ),
        PathSpec("fp32", "fp32", (1, 1), ((0, 0),), "fp32 FMA (each product exact, rounded once)"),
        PathSpec("fp64", "fp64", (1, 1), ((0, 0),), "fp64"),
    )
}


class MeasuredPaths(BaseModel):
    """What one problem's reference gives at one tolerance: its counts for the roofline and each path's error."""

    flops: float
    bytes: float
    out_bytes: float | None = Field(None, description="bytes of the outputs alone (the write no kernel avoids)")
    dtype: str = "fp32"
    precision: str | None = Field(None, description="the precision that judges it (as verify resolves it)")
    atol: float | None = None
    rtol: float | None = None
    errors: dict[str, float | None] = Field(
        default_factory=dict,
        description="path -> max |emulated - reference| / (atol + rtol |reference|) over the outputs and input "
        "sets; None: not finite (the path overflows or gives NaN)",
    )
    products: int = Field(0, description="matrix products and convolutions the reference does per forward")
    flops_by_op: dict[str, float] = Field(default_factory=dict, description="FLOPs by op: matmul, convolution, ...")
    convs: list[Convolution] = Field(default_factory=list, description="the convolutions' geometry and FLOPs")
    levers: list[Lever] = Field(
        default_factory=list, description="levers of the reference's structure, read in the same worker"
    )
    not_emulated: list[str] = Field(default_factory=list, description="ops with FLOPs the emulation leaves alone")
    seeds: list[int] = Field(default_factory=list)
    margin: float = MARGIN
    seconds: float = Field(0.0, description="the measurement's time in the worker")
    cached: bool = Field(False, description="read from the cache under the home, not measured by this call")
    notes: list[str] = Field(default_factory=list)


def code_digest() -> str:
    """This module's, the roofline's and the levers' code: a change to any makes earlier measurements stale."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in [here / "precision_paths.py", here / "structure.py", *sorted((here / "roofline").glob("*.py"))]:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


# ---- rounding and splitting (torch imported lazily: the server imports this module for its models) ----


def round_to(x, fmt: str):
    """x rounded to ``fmt`` and back to fp32."""
    import torch

    x = x.float()
    if fmt == "bf16":
        return x.to(torch.bfloat16).float()
    if fmt == "fp16":
        return x.to(torch.float16).float()
    if fmt == "tf32":  # round to nearest (ties away) on the 10-bit mantissa, as cvt.rna.tf32.f32
        return ((x.view(torch.int32) + 0x1000) & -0x2000).view(torch.float32)
    if fmt == "fp8":  # e4m3 (3-bit mantissa, subnormal step 2^-9, max 448) after a power-of-two scale
        amax = float(x.abs().max()) if x.numel() else 0.0
        scale = 2.0 ** math.floor(math.log2(448.0 / amax)) if 0.0 < amax < float("inf") else 1.0
        y = x * scale
        normal = ((y.view(torch.int32) + 0x80000) & -0x100000).view(torch.float32)  # torch's own cast is slow
        sub = torch.round(y * 512.0) / 512.0
        return torch.where(y.abs() < 2.0**-6, sub, normal).clamp(-448.0, 448.0) / scale
    raise ValueError(f"no rounding for {fmt}")


def split(x, fmt: str, parts: int) -> list:
    out, rest = [], x.float()
    for _ in range(parts):
        p = round_to(rest, fmt)
        out.append(p)
        rest = rest - p
    return out


def _residual(x, fmt: str) -> float:
    x = x.float()
    norm = float(x.norm())
    return float((x - round_to(x, fmt)).norm()) / norm if norm else 0.0


def emulate_product(spec: PathSpec, product, a, b):
    """``product(a, b)`` (a bias-free mm, bmm, mv or convolution) done on ``spec``'s path."""
    if not (a.is_floating_point() and b.is_floating_point()):
        return product(a, b)
    out_dtype = a.dtype
    if spec.base in ("fp32", "fp64"):
        return product(a.double(), b.double()).to(out_dtype)
    na, nb = spec.parts
    terms = spec.terms
    if (na, nb) == (2, 1) and _residual(b, spec.base) > _residual(a, spec.base):
        na, nb, terms = 1, 2, tuple((j, i) for i, j in terms)  # split the side whose rounding loses more
    pa, pb = split(a, spec.base, na), split(b, spec.base, nb)
    (i, j), *rest = terms
    acc = product(pa[i], pb[j])
    for i, j in rest:  # smallest first, hi*hi last
        acc = acc + product(pa[i], pb[j])
    return acc.to(out_dtype)


def _mode_class():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    plain = {aten.addmm.default: aten.mm.default, aten.baddbmm.default: aten.bmm.default}
    plain[aten.addmv.default] = aten.mv.default
    products = {aten.mm.default, aten.bmm.default, aten.mv.default, aten.dot.default}
    with_bias = set(plain) | {aten.addbmm.default}
    # ops whose FLOPs the roofline counts but the emulation leaves alone (named in the notes)
    counted = {
        getattr(aten, op).default: "scaled_dot_product_attention"
        for op in ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math")
        if hasattr(aten, op)
    }

    class EmulatedPath(TorchDispatchMode):
        """Every matrix product and convolution done on one path; everything else as it is."""

        def __init__(self, spec: PathSpec):
            super().__init__()
            self.spec, self.count = spec, 0
            self.skipped: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in products:
                self.count += 1
                return emulate_product(self.spec, lambda x, y: func(x, y), args[0], args[1])
            if func in with_bias:
                self.count += 1
                base, a, b = args[:3]
                beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
                if func is aten.addbmm.default:
                    prod = emulate_product(self.spec, lambda x, y: aten.bmm.default(x, y).sum(0), a, b)
                else:
                    prod = emulate_product(self.spec, lambda x, y: plain[func](x, y), a, b)
                out = prod * alpha if alpha != 1 else prod
                return out + base * beta if beta != 0 else out
            if func in (aten.convolution.default, aten._convolution.default):  # direct and transposed alike
                self.count += 1
                x, w, bias, *rest = args
                out = emulate_product(self.spec, lambda p, q: func(p, q, None, *rest), x, w)
                if bias is not None:
                    out = out + bias.view(1, -1, *([1] * (out.dim() - 2))).to(out.dtype)
                return out
            if func in counted:
                self.skipped.add(counted[func])
            return func(*args, **kwargs)

    return EmulatedPath


def error_fraction(expected, got, atol: float | None, rtol: float | None) -> float | None:
    """max |got - expected| / (atol + rtol |expected|) over every floating output, each at the tolerance verify
    gives its dtype when none is set; None when not finite."""
    import torch

    from kforge_mcp.judge.correctness import flatten_outputs, tolerance_for

    worst = 0.0
    for e, g in zip(flatten_outputs(expected), flatten_outputs(got), strict=True):
        if not (isinstance(e, torch.Tensor) and e.is_floating_point()) or e.numel() == 0:
            continue
        atol, rtol = tolerance_for(e.dtype, atol, rtol)
        e64, g64 = e.double(), g.double()
        if bool((~torch.isfinite(g64) & torch.isfinite(e64)).any()):
            return None
        ok = torch.isfinite(e64)
        diff = (g64 - e64).abs()
        frac = torch.where(diff == 0, 0.0, diff / (atol + rtol * e64.abs()))[ok]  # a zero tolerance: exact or inf
        if frac.numel():
            worst = max(worst, float(frac.max()))
    return worst


# the compute paths open to a problem of each dtype, slowest first
PATHS_FOR = {
    "fp64": ("fp64",),
    "fp32": ("fp32", "bf16x6", "3xtf32", "bf16x3", "fp16x2", "bf16x2", "tf32", "fp16", "bf16", "fp8"),
    "bf16": ("bf16", "fp8"),
    "fp16": ("fp16", "fp8"),
    "fp8": ("fp8",),
}


def paths_for(dtype: str) -> tuple[str, ...]:
    return PATHS_FOR.get(dtype, (dtype,))


def measure_reference(problem, req: RooflineRequest, counts, seeds: tuple[int, ...] = SEEDS) -> MeasuredPaths:
    """In a worker: with the problem's ``counts`` (roofline.count_problem), the error of every path open to
    its dtype, at the tolerance verify would judge it at for ``req`` (precision, atol, rtol)."""
    import torch

    from kforge_mcp.core.problem import reference_model, seed_everything
    from kforge_mcp.judge import precision

    started = time.perf_counter()
    judge = precision.resolve(req, problem)
    dtype = counts.dtype
    model = reference_model(problem, "cpu", 0, judge.dtype)
    mode_cls = _mode_class()
    errors: dict[str, float | None] = {}
    products, skipped = 0, set[str]()
    with torch.no_grad():
        for seed in seeds:
            inputs = judge.cast(problem.make_inputs(seed, "cpu"))
            seed_everything(seed)
            expected = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
            if judge.atol is None or judge.rtol is None:
                from kforge_mcp.judge.correctness import flatten_outputs

                first = next((t for t in flatten_outputs(expected) if isinstance(t, torch.Tensor)), None)
                if first is not None:
                    judge.settle(first.dtype)
            for name in paths_for(dtype):
                spec = PATH_SPECS.get(name)
                if spec is None or (name == dtype and name != "fp32"):
                    continue  # the problem's own dtype is the reference itself (fp32's FMA is measured)
                if name in errors and errors[name] is None:
                    continue
                mode = mode_cls(spec)
                seed_everything(seed)
                with mode:
                    got = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
                products, skipped = max(products, mode.count), skipped | mode.skipped
                if products == 0:
                    break  # nothing to emulate: every path gives the reference itself
                err = error_fraction(expected, got, judge.atol, judge.rtol)
                errors[name] = None if err is None else max(err, errors.get(name) or 0.0)
            if products == 0:
                errors = {}
                break
    notes = []
    if products == 0:
        notes.append("the reference does no matrix product or convolution: every path computes it alike")
    if skipped:
        notes.append(f"not emulated (computed in the problem's dtype): {', '.join(sorted(skipped))}")
    return MeasuredPaths(
        flops=counts.flops,
        bytes=counts.bytes,
        out_bytes=counts.out_bytes,
        dtype=dtype,
        precision=judge.precision,
        atol=judge.atol,
        rtol=judge.rtol,
        errors=errors,
        products=products,
        flops_by_op=counts.flops_by_op,
        convs=list(counts.convs),
        not_emulated=sorted(skipped),
        seeds=list(seeds),
        seconds=round(time.perf_counter() - started, 3),
        notes=notes,
    )
