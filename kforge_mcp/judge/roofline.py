"""Speed of light for a reference forward: FLOPs from torch's FlopCounterMode, minimum bytes
(inputs and parameters read once, outputs written once), and a table of device peaks.

T_SOL = max(flops / peak_flops(path), bytes / peak_bandwidth), where the path is the fastest way
to do the math that still meets the problem's tolerance. With a problem, each path (fp8, fp16,
bf16, tf32, the splits bf16x2/x3/x6, fp16x2, 3xTF32, fp32 FMA) is measured on its own inputs
(precision_paths.py) and the bound takes the fastest whose max error stays within a margin of the
tolerance: an fp32 GEMM at 1e-4 typically passes as bf16x3 (three bf16 MMAs, twice 3xTF32's
rate). Without one, a path is judged by its operands' rounding. A correct kernel that beats the
bound shows the model wrong: the bound is corrected (corrected_bound: a faster path or a lever of the
reference's structure, then the memory floor, the output write) and said so, and the fraction is taken
against it, never over 1.

A convolution is priced as the implicit GEMM a tensor-core kernel runs: its N and K padded up to the
path's MMA shapes (conv_gemm), in the form (a row per output or per input pixel) that pads least.

FlopCounterMode counts matmul, convolution and attention FLOPs only: element-wise ops and
reductions count 0, so such problems come out memory-bound (they nearly always are).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.options import default_tolerance
from kforge_mcp.core.schemas import ComputePath, Convolution, Roofline
from kforge_mcp.judge.precision_paths import MARGIN, PATH_SPECS, PATHS_FOR, MeasuredPaths


@dataclass(frozen=True)
class Peaks:
    name: str
    bandwidth: float  # bytes/s
    flops: dict[str, float] = field(default_factory=dict)  # path -> dense FLOP/s
    source: str = ""
    note: str = ""


T, G = 1e12, 1e9
_NV = "NVIDIA {} datasheet; dense figures (half of the with-sparsity ones); fp32 is the non-tensor FMA rate"
# Dense peaks (no sparsity). fp32 is the FMA pipe; tf32 / bf16 / fp16 / fp8 use tensor cores; 3xtf32 is derived.
DEVICE_PEAKS: dict[str, Peaks] = {
    p.name: p
    for p in [
        Peaks(
            "H100 SXM",
            3.35 * T,
            {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T, "fp8": 1979 * T, "fp64": 67 * T},
            _NV.format("H100 Tensor Core GPU (SXM5)"),
        ),
        Peaks(
            "H100 PCIe",
            2.0 * T,
            {"fp32": 51 * T, "tf32": 378 * T, "bf16": 756 * T, "fp16": 756 * T, "fp8": 1513 * T, "fp64": 51 * T},
            _NV.format("H100 Tensor Core GPU (PCIe)"),
        ),
        Peaks(
            "H100 NVL",
            3.9 * T,
            {
                "fp32": 60 * T,
                "tf32": 417.5 * T,
                "bf16": 835.5 * T,
                "fp16": 835.5 * T,
                "fp8": 1670.5 * T,
                "fp64": 60 * T,
            },
            _NV.format("H100 NVL"),
        ),
        Peaks(
            "H200",
            4.8 * T,
            {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T, "fp8": 1979 * T, "fp64": 67 * T},
            _NV.format("H200 Tensor Core GPU (SXM)"),
        ),
        Peaks(
            "A100 80GB",
            2.039 * T,
            {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T, "fp64": 19.5 * T},
            _NV.format("A100 Tensor Core GPU (80GB SXM)"),
        ),
        Peaks(
            "A100 40GB",
            1.555 * T,
            {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T, "fp64": 19.5 * T},
            _NV.format("A100 Tensor Core GPU (40GB)"),
        ),
        Peaks(
            "L40S",
            0.864 * T,
            {"fp32": 91.6 * T, "tf32": 183 * T, "bf16": 362 * T, "fp16": 362 * T, "fp8": 733 * T},
            _NV.format("L40S"),
        ),
        Peaks(
            "RTX 4090",
            1.008 * T,
            {"fp32": 82.6 * T, "tf32": 82.6 * T, "bf16": 165 * T, "fp16": 165 * T, "fp8": 330 * T},
            "NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090)",
            "fp16/bf16 with fp32 accumulate",
        ),
        Peaks(
            "B200",
            8.0 * T,
            {"fp32": 75 * T, "tf32": 1100 * T, "bf16": 2250 * T, "fp16": 2250 * T, "fp8": 4500 * T},
            "NVIDIA HGX B200 datasheet, per-GPU dense figures",
            "fp32 approximate",
        ),
        Peaks(
            "Intel Data Center GPU Max 1550",
            3.2768 * T,
            {"fp32": 52.4 * T, "tf32": 419 * T, "bf16": 839 * T, "fp16": 839 * T, "fp64": 52.4 * T},
            "Intel Data Center GPU Max Series product brief (XMX dense)",
        ),
        Peaks(
            "Intel Arc B580",
            456 * G,
            {"fp32": 13.7 * T, "tf32": 13.7 * T, "bf16": 117 * T, "fp16": 117 * T},
            "Intel Arc B580 specifications (XMX dense fp16/bf16)",
            "fp32 from 20 Xe2 cores at 2.67 GHz",
        ),
        Peaks("Apple M1", 68.25 * G, {"fp32": 2.6 * T, "fp16": 2.6 * T, "bf16": 2.6 * T}, "Apple M1 announcement"),
        Peaks("Apple M2", 100 * G, {"fp32": 3.6 * T, "fp16": 3.6 * T, "bf16": 3.6 * T}, "Apple M2 announcement"),
        Peaks("Apple M3", 100 * G, {"fp32": 4.1 * T, "fp16": 4.1 * T, "bf16": 4.1 * T}, "public M3 GPU figures"),
        Peaks("Apple M4", 120 * G, {"fp32": 4.3 * T, "fp16": 4.3 * T, "bf16": 4.3 * T}, "public M4 GPU figures"),
        Peaks(
            "Apple M3 Max", 400 * G, {"fp32": 16.4 * T, "fp16": 16.4 * T, "bf16": 16.4 * T}, "public M3 Max GPU figures"
        ),
        Peaks(
            "Apple M4 Max", 546 * G, {"fp32": 18.4 * T, "fp16": 18.4 * T, "bf16": 18.4 * T}, "public M4 Max GPU figures"
        ),
        Peaks(
            "Apple M2 Ultra",
            800 * G,
            {"fp32": 27.2 * T, "fp16": 27.2 * T, "bf16": 27.2 * T},
            "Apple M2 Ultra announcement",
        ),
        Peaks(
            "CPU (generic)",
            50 * G,
            {"fp32": 1 * T, "fp16": 1 * T, "bf16": 1 * T, "fp64": 0.5 * T},
            "placeholder",
            "placeholder figures: a CPU roofline here is a rough guide only",
        ),
    ]
}
DEFAULT_DEVICE = "H100 SXM"

_ALIASES = [  # (substrings that must all appear in the lowercased name, table key), first match wins
    (("h100", "pcie"), "H100 PCIe"),
    (("h100", "nvl"), "H100 NVL"),
    (("h100",), "H100 SXM"),
    (("h200",), "H200"),
    (("gh200",), "H200"),
    (("a100", "40gb"), "A100 40GB"),
    (("a100",), "A100 80GB"),
    (("l40s",), "L40S"),
    (("4090",), "RTX 4090"),
    (("b200",), "B200"),
    (("max 1550",), "Intel Data Center GPU Max 1550"),
    (("b580",), "Intel Arc B580"),
    (("m4 max",), "Apple M4 Max"),
    (("m3 max",), "Apple M3 Max"),
    (("m2 ultra",), "Apple M2 Ultra"),
    (("apple m4",), "Apple M4"),
    (("apple m3",), "Apple M3"),
    (("apple m2",), "Apple M2"),
    (("apple m1",), "Apple M1"),
    (("mps",), "Apple M2"),
    (("sm_90",), "H100 SXM"),
    (("sm_100",), "B200"),
    (("sm_80",), "A100 80GB"),
    (("sm_89",), "L40S"),
    (("cpu",), "CPU (generic)"),
]

# Unit roundoff of each path's operands, for a bound without a problem to measure (precision_paths.py
# measures the paths on the problem's own inputs when there is one): a path can meet a tolerance tol when
# 2u <= tol (the generous side: a bound must never be slower than a kernel that passes). 3xTF32 and bf16x6
# keep about fp32 accuracy (3xTF32: max error ~6e-7 at K=8192).
UNIT_ROUNDOFF = {
    "fp64": 2.0**-53,
    "fp32": 2.0**-24,
    "bf16x6": 2.0**-24,
    "3xtf32": 2.0**-22,
    "tf32": 2.0**-11,
    "fp16": 2.0**-11,
    "bf16": 2.0**-8,
    "fp8": 2.0**-4,
}
# Splits whose error rounding cannot vouch for: bf16x3 keeps ~16 bits and drops lo*lo, and bf16x2 / fp16x2
# leave one operand rounded once; whether they pass depends on K, the tail and the inputs. Only a
# measurement on the problem makes them feasible.
MEASURED_ONLY = ("bf16x3", "bf16x2", "fp16x2")
# Paths open to each problem dtype: converting down is allowed when the tolerance allows it.
TORCH_DTYPE = {"fp64": "float64", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def path_tolerance(dtype: str, atol: float | None, rtol: float | None) -> float:
    """The tolerance a compute path must meet: the looser of atol and rtol, else verify's default for the dtype."""
    return max(t for t in (atol, rtol, 0.0) if t is not None) or default_tolerance(TORCH_DTYPE.get(dtype, dtype))


def lookup_peaks(device_name: str | None) -> tuple[Peaks, str | None]:
    """The table entry for a device name; a note when it was a guess."""
    name = (device_name or "").lower()
    if name:
        for key in DEVICE_PEAKS:
            if key.lower() == name:
                return DEVICE_PEAKS[key], None
        for needles, key in _ALIASES:
            if all(n in name for n in needles):
                note = (
                    None
                    if key.lower().split()[0] in name or "apple" in key.lower()
                    else f"'{device_name}' taken as {key}"
                )
                return DEVICE_PEAKS[key], note
    return DEVICE_PEAKS[
        DEFAULT_DEVICE
    ], f"device '{device_name or 'unknown'}' not in the peaks table: {DEFAULT_DEVICE} figures used"


def table_device(name: str) -> str:
    """The peaks table's name for a device a user names ('h200', 'H100 SXM', 'b200'): its key, or the
    first alias that matches; an InputError listing the table otherwise (never the default's figures)."""
    lowered = name.strip().lower()
    for key in DEVICE_PEAKS:
        if key.lower() == lowered:
            return key
    for needles, key in _ALIASES:
        if lowered and all(n in lowered for n in needles):
            return key
    raise InputError(f"device model '{name}' is not in the peaks table; known: {', '.join(DEVICE_PEAKS)}")


def path_peak(peaks: Peaks, path: str) -> float | None:
    """A path's rate: its format's peak over its products per step. A split is offered only where it beats
    the FMA pipe (a device without tensor cores for the format gains nothing by splitting)."""
    spec = PATH_SPECS.get(path)
    if spec is None:
        return peaks.flops.get(path)
    base = peaks.flops.get(spec.base)
    if not base:
        return None
    rate = base / len(spec.terms)
    return rate if len(spec.terms) == 1 or rate > peaks.flops.get("fp32", 0) else None


def compute_paths(
    peaks: Peaks, dtype: str, atol: float | None, rtol: float | None, measured: MeasuredPaths | None = None
) -> list[ComputePath]:
    """Every path open to the dtype on this device, each marked feasible or not for the tolerance: from its
    max error measured on the problem's inputs when ``measured`` has it, else from its operands' rounding."""
    tol = path_tolerance(dtype, atol, rtol)
    margin = measured.margin if measured is not None else MARGIN
    out = []
    for path in PATHS_FOR.get(dtype, (dtype,)):
        peak = path_peak(peaks, path)
        if not peak:
            continue
        spec = PATH_SPECS.get(path)
        terms = len(spec.terms) if spec else 1
        u = UNIT_ROUNDOFF.get(path, 0.0)
        seen = measured is not None and path in measured.errors
        err = measured.errors.get(path) if measured is not None else None
        said = (
            f"max error {err:.2g} of the tolerance on this problem's inputs"
            if err is not None
            else "not finite on this problem's inputs (overflow or NaN)"
        )
        if path == dtype:
            ok, why = True, f"the problem's own dtype ({dtype})" + (f"; {said}" if seen else "")
        elif seen:
            ok = err is not None and err <= margin
            why = said + (f" (within the margin {margin:g})" if ok else f" (over the margin {margin:g})")
        elif path in MEASURED_ONLY:
            ok, why = False, "its error depends on the problem: feasible only when measured on its inputs"
        elif 2 * u <= tol:
            ok, why = True, f"operand rounding ~{u:.1e} (2u = {2 * u:.1e}) fits the tolerance {tol:g}"
        else:
            ok, why = False, f"operand rounding ~{u:.1e} (2u = {2 * u:.1e}) exceeds the tolerance {tol:g}"
        if terms > 1 and spec:
            why += f"; {spec.how} ({terms} {spec.base} MMAs per step)"
        out.append(ComputePath(path=path, peak_flops=peak, feasible=ok, why=why, terms=terms, max_error=err))
    return out


def fastest(paths: list[ComputePath], cost=None) -> ComputePath | None:
    """The fastest path; within 1% of it (bf16x6 and 3xTF32 on Hopper), the one with fewer products. ``cost``: a
    path's time where it is not the FLOPs over its peak (a convolution's MMA padding differs by path)."""
    if not paths:
        return None
    cost = cost or (lambda p: 1.0 / p.peak_flops)
    top = min(cost(p) for p in paths)
    return min((p for p in paths if cost(p) * 0.99 <= top), key=lambda p: (p.terms, cost(p)))


def path_choice(paths: list[ComputePath], best: ComputePath, tol: float, measured: bool) -> str:
    """Why the bound takes ``best``: its measured error (or rounding), its rate against the next passing path,
    and the faster paths that miss the tolerance."""
    reason = f"{best.path} at {best.peak_flops / 1e12:.4g} TFLOP/s: the fastest path that meets the tolerance {tol:g}"
    if measured and best.max_error is not None:
        reason = f"{best.path}: max error {best.max_error:.2g} of the tolerance {tol:g} on this problem's inputs"
    slower = [p for p in paths if p.feasible and p.peak_flops < best.peak_flops]
    if slower:
        nxt = fastest(slower) or best
        ratio = best.peak_flops / nxt.peak_flops
        rate = "twice" if abs(ratio - 2) < 0.05 else f"{ratio:.3g}x"
        reason += f", {rate} {nxt.path}'s rate ({best.peak_flops / 1e12:.4g} TFLOP/s)"
    faster = sorted((p for p in paths if not p.feasible), key=lambda p: -p.peak_flops)
    if faster and measured:
        miss = ", ".join(
            f"{p.path} {p.max_error:.2g}" if p.max_error is not None else f"{p.path} not finite" for p in faster
        )
        reason += f"; faster paths miss the margin {MARGIN:g} (max error: {miss})"
    elif faster:
        coarse = [p.path for p in faster if p.path not in MEASURED_ONLY]
        unmeasured = [p.path for p in faster if p.path in MEASURED_ONLY]
        said = [f"{', '.join(coarse)} round too coarsely for it"] if coarse else []
        said += [f"{', '.join(unmeasured)} need a measurement on the problem's inputs"] if unmeasured else []
        reason += f" ({'; '.join(said)}; see paths)"
    return reason


def dtype_key(dtype) -> str:
    s = str(dtype).replace("torch.", "")
    return {
        "float32": "fp32",
        "float": "fp32",
        "float16": "fp16",
        "half": "fp16",
        "bfloat16": "bf16",
        "float64": "fp64",
        "double": "fp64",
    }.get(s, "fp8" if "float8" in s else "fp32")


# ---- convolutions: the implicit GEMM a tensor-core kernel runs ----

# The smallest K and N of any MMA instruction of a format (PTX ISA: mma.sync m16n8k8 for f16/bf16, m16n8k4 for tf32,
# m16n8k16 for e4m3/e5m2; wgmma.mma_async's K is twice these, its N a multiple of 8). A tensor-core kernel pads its
# GEMM's K and N up to them; it may swap M and N, but M's shapes (16, 64) are coarser, so 8 on the channel side is
# the least it pays. Smaller K shapes than wgmma's keep the bound a lower bound for a kernel that ends K on mma.sync.
MMA_K = {"fp16": 8, "bf16": 8, "tf32": 4, "fp8": 16}
MMA_N = 8


def mma_granules(peaks: Peaks, path: str) -> tuple[int, int]:
    """(K, N) a path's products are padded to: 1 on the FMA pipe, and on a device without a faster unit."""
    spec = PATH_SPECS.get(path)
    base = spec.base if spec else path
    if base not in MMA_K or peaks.flops.get(base, 0.0) <= peaks.flops.get("fp32", 0.0):
        return 1, 1
    return MMA_K[base], MMA_N


def _pad(x: int, g: int) -> int:
    return -(-x // g) * g


def _phases(extent: int, k: int, s: int, p: int, d: int) -> list[tuple[int, int]]:
    """(pixels, taps) per residue mod the stride along one dim, for the form whose rows are on the strided side
    (a transposed convolution's outputs, a direct one's inputs): a pixel meets only the taps of its residue."""
    out = []
    for r in range(min(s, extent)):
        taps = sum(1 for kk in range(k) if (r + p - kk * d) % s == 0)
        if taps:
            out.append((len(range(r, extent, s)), taps))
    return out


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
            per_dim = [_phases(*a) for a in zip(extent, c.kernel, c.stride, c.padding, c.dilation, strict=True)]
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


def output_floor(r: Roofline) -> bool:
    """A memory bound set mostly by the output write (e.g. a transposed convolution's upsampled output)."""
    return r.bound == "memory" and bool(r.out_bytes) and (r.out_bytes or 0.0) >= 0.5 * r.bytes


def bound_text(r: Roofline) -> str:
    """What sets the bound, in the roofline's own figures."""
    tb = r.peak_bandwidth / 1e12
    if r.bound == "memory" and output_floor(r):
        head = (
            f"memory-bound: the floor is the {(r.out_bytes or 0.0) / 1e6:.3g} MB output write "
            f"({(r.out_bytes or 0.0) / r.bytes:.0%} of the {r.bytes / 1e6:.3g} MB minimum, {r.byte_ms:.4g} ms at "
            f"{tb:.3g} TB/s)"
        )
    elif r.bound == "memory":
        head = (
            f"memory-bound: {r.bytes / 1e6:.4g} MB minimum (inputs and weights read once, outputs written once), "
            f"{r.byte_ms:.4g} ms at {tb:.3g} TB/s"
        )
    else:
        head = (
            f"compute-bound: {r.compute_flops or r.flops:.4g} FLOPs on the {r.path} path at "
            f"{r.peak_flops / 1e12:.4g} TFLOP/s, {r.flop_ms:.4g} ms"
        )
    other = (
        f"; compute {r.flop_ms:.4g} ms on the {r.path} path"
        if r.bound == "memory"
        else f"; memory {r.byte_ms:.4g} ms for {r.bytes / 1e6:.4g} MB"
    )
    for c in r.convs:
        pad = c.padded_flops / c.flops if c.flops else 1.0
        other += f"; {conv_shape(c)}, {c.flops:.4g} FLOPs" + (
            f" padded to {c.padded_flops:.4g} (x{pad:.3g}) for the MMA's K and N" if pad > 1.0 + 1e-9 else ""
        )
    return head + other


def make_roofline(
    flops: float,
    nbytes: float,
    dtype: str = "fp32",
    device_name: str | None = None,
    measured_ms: float | None = None,
    peak_flops: float | None = None,
    peak_bandwidth: float | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    measured: MeasuredPaths | None = None,
    out_bytes: float | None = None,
    convs: list[Convolution] | None = None,
    flops_by_op: dict[str, float] | None = None,
) -> Roofline:
    """``measured``: the paths' errors on the problem's own inputs (precision_paths.py); without it each path
    is judged by its operands' rounding. ``convs``: the reference's convolutions, whose implicit GEMMs a
    tensor-core path pads to its MMA shapes (their FLOPs are part of ``flops``)."""
    peaks, note = lookup_peaks(device_name)
    notes = [note] if note else []
    if measured is not None:
        notes += measured.notes
        convs = measured.convs if convs is None else convs
        flops_by_op = measured.flops_by_op if flops_by_op is None else flops_by_op
    convs = convs or []
    paths = compute_paths(peaks, dtype, atol, rtol, measured)
    feasible = [p for p in paths if p.feasible] or paths

    def cost(p: ComputePath) -> float:  # a path's compute time per peak FLOP/s: its padding differs by path
        return compute_flops(flops, convs, *mma_granules(peaks, p.path)) / p.peak_flops

    best = fastest(feasible, cost)
    path = best.path if best else dtype
    pf = peak_flops or (best.peak_flops if best else peaks.flops["fp32"])  # every table entry has fp32
    bw = peak_bandwidth or peaks.bandwidth
    if peak_flops or peak_bandwidth:
        notes.append("peaks overridden by the caller")
    if peaks.note:
        notes.append(f"{peaks.name}: {peaks.note}")
    tol = path_tolerance(dtype, atol, rtol)
    measured_any = measured is not None and bool(measured.errors)
    reason = path_choice(paths, best, tol, measured_any) if best else f"{dtype}: no path in the {peaks.name} table"
    by_peak = fastest(feasible)
    if best and by_peak and by_peak.path != best.path:
        reason += (
            f"; {by_peak.path}'s higher peak loses to the convolutions' MMA padding on it "
            f"({compute_flops(flops, convs, *mma_granules(peaks, by_peak.path)):.4g} FLOPs there)"
        )
    granules = mma_granules(peaks, path)
    paid = compute_flops(flops, convs, *granules)
    flop_ms, byte_ms = paid / pf * 1e3, nbytes / bw * 1e3
    sol = max(flop_ms, byte_ms)
    r = Roofline(
        flops=flops,
        bytes=nbytes,
        out_bytes=out_bytes if out_bytes is not None else (measured.out_bytes if measured is not None else None),
        dtype=dtype,
        path=path,
        path_reason=reason,
        paths=paths,
        paths_measured=measured_any,
        atol=atol,
        rtol=rtol,
        device=peaks.name,
        peaks_source=peaks.source,
        peak_flops=pf,
        peak_bandwidth=bw,
        sol_ms=sol,
        flop_ms=flop_ms,
        byte_ms=byte_ms,
        bound="compute" if flop_ms > byte_ms else "memory",
        kind=problem_kind(flops_by_op or {}, convs),
        flops_by_op=flops_by_op or {},
        convs=[conv_gemm(c, *granules) for c in convs],
        compute_flops=paid,
        notes=notes,
    )
    r.bound_reason = bound_text(r)
    if flops == 0:
        r.notes.append("FlopCounterMode counted 0 FLOPs (it counts matmul/conv/attention only): the bound is memory")
    return with_measured(r, measured_ms)


def from_measured(
    m: MeasuredPaths,
    device_name: str | None,
    measured_ms: float | None = None,
    peak_flops: float | None = None,
    peak_bandwidth: float | None = None,
) -> Roofline:
    """The roofline of a problem whose paths were measured, for one device and time (structure.measured_roofline
    adds the levers read in the same worker)."""
    return make_roofline(
        m.flops, m.bytes, m.dtype, device_name, measured_ms, peak_flops, peak_bandwidth, m.atol, m.rtol, m
    )


def lever_sol_ms(r: Roofline, flops_after: float, bytes_after: float) -> float:
    """T_SOL of the forward after a lever, on ``r``'s path and peaks: its compute term scales with the FLOPs left
    (a convolution's padding stays in proportion)."""
    compute = r.flop_ms * flops_after / r.flops if r.flops > 0 else 0.0
    return max(compute, bytes_after / r.peak_bandwidth * 1e3)


def corrected_bound(r: Roofline, measured_ms: float) -> tuple[float, str]:
    """A time below the bound shows which assumption failed. The bound steps down to the next faster path (the
    kernel runs a path the model judged too coarse, or a faster one than it knew) or to a lever of the
    reference's structure the kernel takes (less work than the reference does), the tightest of them first;
    then to the memory floor (FLOPs free), and to the output write alone (inputs served from a cache). The first
    step at or under the measured time is the corrected bound."""
    steps = []
    peaks, _ = lookup_peaks(r.device)
    for p in sorted(r.paths, key=lambda p: -p.peak_flops):
        ms = compute_flops(r.flops, r.convs, *mma_granules(peaks, p.path)) / p.peak_flops * 1e3
        if ms < r.flop_ms:
            steps.append(
                (
                    max(ms, r.byte_ms),
                    (
                        f"the kernel's math is faster than the {r.path} path allows: bound taken on the {p.path} "
                        f"path ({p.peak_flops / 1e12:.4g} TFLOP/s; {p.why})"
                    ),
                )
            )
    for lv in r.levers:
        if lv.sol_ms_after < r.sol_ms:
            saves = f"{lv.flops_saved:.4g} FLOPs and {lv.bytes_saved:.4g} bytes fewer a forward"
            steps.append(
                (
                    lv.sol_ms_after,
                    f"the kernel takes the lever '{lv.title}': {saves}; bound taken as the lever's "
                    f"{lv.sol_ms_after:.4g} ms",
                )
            )
    last = [(r.byte_ms, "bound taken as the memory floor: the minimum bytes at peak bandwidth, FLOPs free")]
    if r.out_bytes:
        last.append(
            (
                r.out_bytes / r.peak_bandwidth * 1e3,
                "the inputs did not all come from DRAM: bound taken as the output write alone at peak bandwidth",
            )
        )
    for sol, why in sorted(steps, key=lambda x: -x[0]) + last:
        if sol <= measured_ms:
            return sol, why
    return measured_ms, (
        "faster than writing the output at peak bandwidth: the peaks or the byte count are wrong for this "
        "device (verify flags faster_than_light); fraction set to 1"
    )


def with_measured(r: Roofline, measured_ms: float | None) -> Roofline:
    """Attach a measured time. A time below the bound means the model is wrong: the bound is corrected
    (corrected_bound) and said so, and the fraction is taken against the corrected bound, never over 1."""
    r.measured_ms = measured_ms
    r.fraction_of_sol, r.below_bound, r.corrected_sol_ms, r.correction = None, False, None, None
    r.notes = [n for n in r.notes if not n.startswith("measured ")]
    if measured_ms and measured_ms > 0:
        if measured_ms >= r.sol_ms:
            r.fraction_of_sol = r.sol_ms / measured_ms
        else:
            sol, why = corrected_bound(r, measured_ms)
            r.below_bound, r.corrected_sol_ms, r.correction = True, sol, why
            r.fraction_of_sol = min(1.0, sol / measured_ms)
            r.notes.append(
                f"measured {measured_ms:.4g} ms is below the bound {r.sol_ms:.4g} ms on the {r.path} path: the "
                f"model is wrong for this kernel; {why} ({sol:.4g} ms)"
            )
    return r


def set_verify_bound(report, roof: Roofline, candidate_ms: float) -> None:
    """A verify report's bound (sol_ms, fraction_of_sol, sol_path, compute_paths) from a roofline with the
    candidate's time, and the finding that says so when the candidate beat the model."""
    from kforge_mcp.core.schemas import Finding

    report.sol_ms = roof.corrected_sol_ms if roof.below_bound else roof.sol_ms
    report.fraction_of_sol = roof.fraction_of_sol
    report.sol_path = (
        f"{roof.path} ({roof.bound}-bound on {roof.device}): {roof.path_reason}"
        + (f"; {roof.kind}: {roof.bound_reason}" if roof.convs else "")
        + (f"; corrected: {roof.correction}" if roof.below_bound else "")
    )
    report.compute_paths = roof.paths
    report.findings = [f for f in report.findings if f.code != "below_speed_of_light_model"]
    if roof.below_bound:
        report.findings.append(
            Finding(
                code="below_speed_of_light_model",
                severity="info",
                evidence={
                    "candidate_ms": candidate_ms,
                    "model_sol_ms": roof.sol_ms,
                    "path": roof.path,
                    "corrected_sol_ms": roof.corrected_sol_ms,
                },
                message=roof.notes[-1],
            )
        )


# ---- inside a worker: these run the reference ----


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


def reference_roofline(
    problem,
    device: str,
    device_name: str | None,
    measured_ms: float | None = None,
    peaks: dict | None = None,
    atol: float | None = None,
    rtol: float | None = None,
) -> Roofline:
    """The reference's roofline, its paths judged by their rounding (the server measures them: precision_paths)."""
    peaks = peaks or {}
    c = count_problem(problem, device)
    return make_roofline(
        c.flops,
        c.bytes,
        c.dtype,
        device_name,
        measured_ms,
        peaks.get("flops"),
        peaks.get("bandwidth"),
        atol,
        rtol,
        out_bytes=c.out_bytes,
        convs=list(c.convs),
        flops_by_op=c.flops_by_op,
    )
