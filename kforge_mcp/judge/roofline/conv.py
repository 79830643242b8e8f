"""Convolutions as the implicit GEMM a tensor-core kernel runs: their N and K padded up to the path's MMA
shapes (its device's platform says them), in the form (a row per output or per input pixel) that pads least."""

from __future__ import annotations

import itertools
import math

from kforge_mcp.core.schemas import Convolution
from kforge_mcp.judge.precision_paths import PATH_SPECS
from kforge_mcp.judge.roofline.paths import dtype_bytes
from kforge_mcp.platforms.base import Peaks


def mma_granules(peaks: Peaks, path: str) -> tuple[int, int]:
    """(K, N) a path's products are padded to: its device's MMA shapes (the platform's peaks.toml), 1 on the FMA
    pipe, and on a device without a faster unit for the format."""
    spec = PATH_SPECS.get(path)
    base = spec.base if spec else path
    if base not in peaks.mma_k or peaks.flops.get(base, 0.0) <= peaks.flops.get("fp32", 0.0):
        return 1, 1
    return peaks.mma_k[base], peaks.mma_n


def _pad(x: int, g: int) -> int:
    return -(-x // g) * g


def stride_phases(extent: int, k: int, s: int, p: int, d: int) -> list[tuple[int, int]]:
    """(pixels, taps) per residue mod the stride along one dim, for the form whose rows are on the strided side
    (a transposed convolution's outputs, a direct one's inputs): a pixel meets only the taps of its residue."""
    out = []
    for r in range(min(s, extent)):
        taps = sum(1 for kk in range(k) if (r + p - kk * d) % s == 0)
        if taps:
            out.append((len(range(r, extent, s)), taps))
    return out


def output_phases(c: Convolution) -> list[list[tuple[int, int]]]:
    """stride_phases of each dim over a convolution's outputs: for a transposed one, its output parity classes."""
    return [
        stride_phases(o, k, s, p, d) for o, k, s, p, d in zip(c.out_spatial, c.kernel, c.stride, c.padding, c.dilation)
    ]


def taps_met(c: Convolution) -> float:
    """Taps an output pixel meets on average: all of them for a direct convolution, for a transposed one those of
    its residue mod the stride along each dim."""
    if not c.transposed:
        return float(math.prod(c.kernel))
    return math.prod(sum(n * taps for n, taps in dim) for dim in output_phases(c)) / math.prod(c.out_spatial)


def depth(c: Convolution) -> float:
    """Multiply-adds an output pixel takes, its K loop's length whatever GEMM form the bound priced: input channels
    (a group's) x the taps it meets."""
    return c.c_in / c.groups * taps_met(c)


def input_pass_bytes(c: Convolution, dtype: str) -> float:
    """Bytes of one pass over a convolution's input that reads it once and writes it once (a channels-last
    re-layout, or its split into the parts of a multi-term path: the same bytes)."""
    return 2.0 * c.batch * c.c_in * math.prod(c.in_spatial) * dtype_bytes(dtype)


def conv_gemm(c: Convolution, gk: int = 1, gn: int = 1) -> Convolution:
    """``c`` as the implicit GEMM that pads least to granules (gk, gn): 'gather' (a row per output pixel, K =
    C_in/groups x taps, N = C_out/groups) or 'scatter' (a row per input pixel, K = C_in/groups, N = C_out/groups x
    taps). A direct convolution's natural form is gather, a transposed one's scatter: their FLOPs are the counted
    ones. The other form walks the strided side, so it splits into stride phases with fewer taps each (a transposed
    convolution as the convolution of its output without the stride's zeros); it wins where its K or N pads less."""
    cin, cout = c.c_in // c.groups, c.c_out // c.groups
    natural = "scatter" if c.transposed else "gather"
    forms = []
    for form in ("gather", "scatter"):
        if form == natural:
            extent = c.in_spatial if c.transposed else c.out_spatial
            per_dim = [[(x, kk)] for x, kk in zip(extent, c.kernel, strict=True)]
        else:
            extent = c.out_spatial if c.transposed else c.in_spatial
            per_dim = [stride_phases(*a) for a in zip(extent, c.kernel, c.stride, c.padding, c.dilation, strict=True)]
        plain = padded = 0.0
        rows, top = 0, (0.0, 0, 0)
        for combo in itertools.product(*per_dim):
            pixels = c.batch * math.prod(x for x, _ in combo)
            taps = math.prod(t for _, t in combo)
            n, k = (cout, cin * taps) if form == "gather" else (cout * taps, cin)
            plain += pixels * n * k
            padded += pixels * _pad(n, gn) * _pad(k, gk)
            rows += pixels
            top = max(top, (pixels * n * k, n, k))
        if plain:
            phases = math.prod(len(d) for d in per_dim)
            forms.append((padded / plain, form != natural, form, rows, top[1], top[2], phases))
    if not forms:  # an empty batch or volume: nothing to pad
        return c.model_copy(update=dict(padded_flops=c.flops))
    ratio, _, form, m, n, k, phases = min(forms)
    return c.model_copy(update=dict(form=form, m=m, n=n, k=k, phases=phases, padded_flops=c.flops * ratio))


def compute_flops(flops: float, convs: list[Convolution], gk: int = 1, gn: int = 1) -> float:
    """The FLOPs a path pays: the convolutions' padded to its MMA granules (gk, gn), the rest as counted."""
    if not convs or (gk, gn) == (1, 1):
        return flops
    return flops - sum(c.flops for c in convs) + sum(conv_gemm(c, gk, gn).padded_flops for c in convs)


def conv_label(c: Convolution) -> str:
    return f"convolution ({'transposed ' if c.transposed else ''}{len(c.kernel)}d)"


def conv_shape(c: Convolution) -> str:
    """'conv_transpose3d as a scatter implicit GEMM M=262144 N=1728 K=32'."""
    phased = f" in {c.phases} stride phases (the largest's N and K)" if c.phases > 1 else ""
    groups = f" in each of {c.groups} groups" if c.groups > 1 else ""
    return f"{c.op} as a {c.form} implicit GEMM M={c.m} N={c.n} K={c.k}{groups}{phased}"


def problem_kind(flops_by_op: dict[str, float], convs: list[Convolution]) -> str | None:
    """The ops that carry most of the FLOPs, a convolution named by its dims and direction."""
    total = sum(flops_by_op.values())
    if total <= 0:
        return None
    op = max(flops_by_op, key=lambda o: flops_by_op[o])
    if op == "convolution" and convs:
        return conv_label(max(convs, key=lambda c: c.flops))
    return op
