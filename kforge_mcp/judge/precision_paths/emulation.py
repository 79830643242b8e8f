"""Each compute path's products emulated on the CPU: operands rounded to the path's format or split into parts
whose products are summed, and the dispatch mode that runs a reference's products and convolutions that way."""

from __future__ import annotations

import math
from dataclasses import dataclass


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


def round_to(x, fmt: str):
    """x rounded to ``fmt`` and back to fp32, as a new tensor. Temporaries are updated in place: a weight's part is
    a full-size tensor, and each fresh one costs its pages again (most of the time on a CPU)."""
    import torch

    x = x.float()
    if fmt == "bf16":
        return x.to(torch.bfloat16).float()
    if fmt == "fp16":
        return x.to(torch.float16).float()
    if fmt == "tf32":  # round to nearest (ties away) on the 10-bit mantissa, as cvt.rna.tf32.f32
        return (x.view(torch.int32) + 0x1000).bitwise_and_(-0x2000).view(torch.float32)
    if fmt == "fp8":  # e4m3 (3-bit mantissa, subnormal step 2^-9, max 448) after a power-of-two scale
        if x.numel():
            low, high = torch.aminmax(x)
            amax = max(-float(low), float(high))
        else:
            amax = 0.0
        scale = 2.0 ** math.floor(math.log2(448.0 / amax)) if 0.0 < amax < float("inf") else 1.0
        y = x * scale
        out = (y.view(torch.int32) + 0x80000).bitwise_and_(-0x100000).view(torch.float32)  # torch's own cast is slow
        normal = y.abs_() >= 2.0**-6
        sub = torch.mul(x, scale).add_(24576.0).sub_(24576.0)  # to a multiple of 2^-9, ties to even
        return out.where(normal, sub).clamp_(-448.0, 448.0).div_(scale)
    raise ValueError(f"no rounding for {fmt}")


def split(x, fmt: str, parts: int, have: list | None = None) -> list:
    """x as ``parts`` summands in ``fmt`` (continuing ``have``, the first of them); fp64: x itself in fp64."""
    if fmt == "fp64":
        return [x.double()]
    out, rest = list(have or []), None  # rest: what the parts so far leave of x, ours to update in place

    def take(p) -> None:
        nonlocal rest
        rest = x.float() - p if rest is None else rest.sub_(p)

    for p in out:
        take(p)
    while len(out) < parts:
        out.append(round_to(x if rest is None else rest, fmt))
        if len(out) < parts:  # what the last part leaves is not needed
            take(out[-1])
    return out


class Splits:
    """The parts of the tensors that stay the same between forwards (parameters and buffers), kept: a weight is
    split once per format rather than once per path and input set (an 8192 x 8192 weight takes about a second a
    part on 2 busy cores). ``drop`` frees a format no later path uses."""

    def __init__(self, tensors=()) -> None:
        self.kept = {t.data_ptr() for t in tensors}
        self.parts: dict[tuple, list] = {}
        self.residuals: dict[tuple, float] = {}

    @staticmethod
    def _key(x, fmt: str) -> tuple:
        return (x.data_ptr(), tuple(x.shape), tuple(x.stride()), x.dtype, fmt)

    def split(self, x, fmt: str, parts: int) -> list:
        if x.data_ptr() not in self.kept:
            return split(x, fmt, parts)
        key = self._key(x, fmt)
        have = self.parts.get(key, [])
        if len(have) < parts:
            self.parts[key] = have = split(x, fmt, parts, have)
        return have[:parts]

    def residual(self, x, fmt: str) -> float:
        """|x - round(x)| / |x|: how much one rounding of x to ``fmt`` loses."""
        key = self._key(x, fmt)
        if key not in self.residuals:
            x32 = x.float()
            norm = float(x32.norm())
            loss = float((x32 - self.split(x, fmt, 1)[0]).norm()) / norm if norm else 0.0
            if x.data_ptr() not in self.kept:
                return loss
            self.residuals[key] = loss
        return self.residuals[key]

    def drop(self, fmt: str) -> None:
        self.parts = {k: v for k, v in self.parts.items() if k[-1] != fmt}


def emulate_product(spec: PathSpec, product, a, b, splits: Splits | None = None):
    """``product(a, b)`` (a bias-free mm, bmm, mv or convolution) done on ``spec``'s path; ``splits`` keeps the
    parts of tensors that recur."""
    if not (a.is_floating_point() and b.is_floating_point()):
        return product(a, b)
    splits = splits or Splits()
    out_dtype = a.dtype
    if spec.base in ("fp32", "fp64"):
        return product(splits.split(a, "fp64", 1)[0], splits.split(b, "fp64", 1)[0]).to(out_dtype)
    na, nb = spec.parts
    terms = spec.terms
    if (na, nb) == (2, 1) and splits.residual(b, spec.base) > splits.residual(a, spec.base):
        na, nb, terms = 1, 2, tuple((j, i) for i, j in terms)  # split the side whose rounding loses more
    pa, pb = splits.split(a, spec.base, na), splits.split(b, spec.base, nb)
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

        def __init__(self, spec: PathSpec, splits: Splits | None = None):
            super().__init__()
            self.spec, self.count, self.splits = spec, 0, splits
            self.skipped: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in products:
                self.count += 1
                return emulate_product(self.spec, lambda x, y: func(x, y), args[0], args[1], self.splits)
            if func in with_bias:
                self.count += 1
                base, a, b = args[:3]
                beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
                if func is aten.addbmm.default:
                    prod = emulate_product(self.spec, lambda x, y: aten.bmm.default(x, y).sum(0), a, b, self.splits)
                else:
                    prod = emulate_product(self.spec, lambda x, y: plain[func](x, y), a, b, self.splits)
                out = prod * alpha if alpha != 1 else prod
                return out + base * beta if beta != 0 else out
            if func in (aten.convolution.default, aten._convolution.default):  # direct and transposed alike
                self.count += 1
                x, w, bias, *rest = args
                out = emulate_product(self.spec, lambda p, q: func(p, q, None, *rest), x, w, self.splits)
                if bias is not None:
                    out = out + bias.view(1, -1, *([1] * (out.dim() - 2))).to(out.dtype)
                return out
            if func in counted:
                self.skipped.add(counted[func])
            return func(*args, **kwargs)

    return EmulatedPath


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
