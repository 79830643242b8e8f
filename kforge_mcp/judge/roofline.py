"""Speed of light for a reference forward: FLOPs from torch's FlopCounterMode, minimum bytes
(inputs and parameters read once, outputs written once), and a table of device peaks.

T_SOL = max(flops / peak_flops(path), bytes / peak_bandwidth), where the path is the fastest way
to do the math that still meets the problem's tolerance. With a problem, each path (fp8, fp16,
bf16, tf32, the splits bf16x2/x3/x6, fp16x2, 3xTF32, fp32 FMA) is measured on its own inputs
(precision_paths.py) and the bound takes the fastest whose max error stays within a margin of the
tolerance: an fp32 GEMM at 1e-4 typically passes as bf16x3 (three bf16 MMAs, twice 3xTF32's
rate). Without one, a path is judged by its operands' rounding. A correct kernel that beats the
bound shows the model wrong: the bound is corrected (corrected_bound: a faster path, the memory
floor, the output write) and said so, and the fraction is taken against it, never over 1.

FlopCounterMode counts matmul, convolution and attention FLOPs only: element-wise ops and
reductions count 0, so such problems come out memory-bound (they nearly always are).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.options import default_tolerance
from kforge_mcp.core.schemas import ComputePath, Roofline
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


def fastest(paths: list[ComputePath]) -> ComputePath | None:
    """The fastest path; within 1% of it (bf16x6 and 3xTF32 on Hopper), the one with fewer products."""
    if not paths:
        return None
    top = max(p.peak_flops for p in paths)
    return min((p for p in paths if p.peak_flops >= 0.99 * top), key=lambda p: (p.terms, -p.peak_flops))


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
) -> Roofline:
    """``measured``: the paths' errors on the problem's own inputs (precision_paths.py); without it each path
    is judged by its operands' rounding."""
    peaks, note = lookup_peaks(device_name)
    notes = [note] if note else []
    if measured is not None:
        notes += measured.notes
    paths = compute_paths(peaks, dtype, atol, rtol, measured)
    feasible = [p for p in paths if p.feasible] or paths
    best = fastest(feasible)
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
    flop_ms, byte_ms = flops / pf * 1e3, nbytes / bw * 1e3
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
        notes=notes,
    )
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
    """The roofline of a problem whose paths were measured, for one device and time."""
    return make_roofline(
        m.flops, m.bytes, m.dtype, device_name, measured_ms, peak_flops, peak_bandwidth, m.atol, m.rtol, m
    )


def corrected_bound(r: Roofline, measured_ms: float) -> tuple[float, str]:
    """A time below the bound shows which assumption failed. The bound steps down, in order, to the next
    faster path (the kernel runs a path the model judged too coarse, or a faster one than it knew), to the
    memory floor (FLOPs free), and to the output write alone (inputs served from a cache); the first step
    at or under the measured time is the corrected bound."""
    steps = []
    for p in sorted(r.paths, key=lambda p: -p.peak_flops):
        if p.peak_flops > r.peak_flops:
            steps.append(
                (
                    max(r.flops / p.peak_flops * 1e3, r.byte_ms),
                    (
                        f"the kernel's math is faster than the {r.path} path allows: bound taken on the {p.path} "
                        f"path ({p.peak_flops / 1e12:.4g} TFLOP/s; {p.why})"
                    ),
                )
            )
    steps.append((r.byte_ms, "bound taken as the memory floor: the minimum bytes at peak bandwidth, FLOPs free"))
    if r.out_bytes:
        steps.append(
            (
                r.out_bytes / r.peak_bandwidth * 1e3,
                "the inputs did not all come from DRAM: bound taken as the output write alone at peak bandwidth",
            )
        )
    for sol, why in sorted(steps, key=lambda x: -x[0]):
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
    report.sol_path = f"{roof.path} ({roof.bound}-bound on {roof.device}): {roof.path_reason}" + (
        f"; corrected: {roof.correction}" if roof.below_bound else ""
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


def count_reference(model, inputs: list) -> Counts:
    """FLOPs, minimum bytes, dominant dtype key and output bytes of one forward of ``model`` on ``inputs``."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad():
        counter = FlopCounterMode(display=False)
        with counter:
            out = model(*inputs)
    flops = float(counter.get_total_flops())
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
    return Counts(flops, nbytes, dtype, out_bytes)


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
    )
