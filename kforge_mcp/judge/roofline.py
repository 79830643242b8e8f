"""Speed of light for a reference forward: FLOPs from torch's FlopCounterMode, minimum bytes
(inputs and parameters read once, outputs written once), and a table of device peaks.

T_SOL = max(flops / peak_flops(path), bytes / peak_bandwidth), where the path is the fastest way
to do the math that can still meet the problem's tolerance: an fp32 problem judged at 1e-4 can
run on tensor cores as 3xTF32 (three TF32 MMAs per product, fp32-level accuracy), so its bound
uses that rate, not the FMA pipe's. A bound a correct kernel beats is no bound: a measured time
below it is reported as the model being wrong (``below_bound``), never as a fraction over 1.

FlopCounterMode counts matmul, convolution and attention FLOPs only: element-wise ops and
reductions count 0, so such problems come out memory-bound (they nearly always are).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kforge_mcp.core.options import default_tolerance
from kforge_mcp.core.schemas import ComputePath, Roofline


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

# Unit roundoff of each path's operands: a path can meet a tolerance tol when 2u <= tol (the
# generous side: a bound must never be slower than a kernel that passes). 3xTF32 splits each fp32
# operand into two TF32 parts and keeps about fp32 accuracy (max error ~6e-7 at K=8192).
UNIT_ROUNDOFF = {
    "fp64": 2.0**-53,
    "fp32": 2.0**-24,
    "3xtf32": 2.0**-22,
    "tf32": 2.0**-11,
    "fp16": 2.0**-11,
    "bf16": 2.0**-8,
    "fp8": 2.0**-4,
}
# Paths open to each problem dtype: converting down is allowed when the tolerance allows it.
PATHS_FOR = {
    "fp64": ("fp64",),
    "fp32": ("fp32", "3xtf32", "tf32", "fp16", "bf16", "fp8"),
    "bf16": ("bf16", "fp8"),
    "fp16": ("fp16", "fp8"),
    "fp8": ("fp8",),
}
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


def path_peak(peaks: Peaks, path: str) -> float | None:
    if path == "3xtf32":
        tf32 = peaks.flops.get("tf32")
        return tf32 / 3 if tf32 and tf32 > peaks.flops.get("fp32", 0) else None
    return peaks.flops.get(path)


def compute_paths(peaks: Peaks, dtype: str, atol: float | None, rtol: float | None) -> list[ComputePath]:
    """Every path open to the dtype on this device, each marked feasible or not for the tolerance."""
    tol = path_tolerance(dtype, atol, rtol)
    out = []
    for path in PATHS_FOR.get(dtype, (dtype,)):
        peak = path_peak(peaks, path)
        if not peak:
            continue
        u = UNIT_ROUNDOFF.get(path, 0.0)
        if path == dtype:
            ok, why = True, f"the problem's own dtype ({dtype})"
        elif 2 * u <= tol:
            ok, why = True, f"operand rounding ~{u:.1e} (2u = {2 * u:.1e}) fits the tolerance {tol:g}"
        else:
            ok, why = False, f"operand rounding ~{u:.1e} (2u = {2 * u:.1e}) exceeds the tolerance {tol:g}"
        out.append(ComputePath(path=path, peak_flops=peak, feasible=ok, why=why))
    return out


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
) -> Roofline:
    peaks, note = lookup_peaks(device_name)
    notes = [note] if note else []
    paths = compute_paths(peaks, dtype, atol, rtol)
    feasible = [p for p in paths if p.feasible] or paths
    best = max(feasible, key=lambda p: p.peak_flops) if feasible else None
    path = best.path if best else dtype
    pf = peak_flops or (best.peak_flops if best else peaks.flops.get("fp32"))
    bw = peak_bandwidth or peaks.bandwidth
    if peak_flops or peak_bandwidth:
        notes.append("peaks overridden by the caller")
    if peaks.note:
        notes.append(f"{peaks.name}: {peaks.note}")
    tol = path_tolerance(dtype, atol, rtol)
    too_coarse = [p.path for p in paths if not p.feasible]
    reason = f"{path} at {pf / 1e12:.4g} TFLOP/s: the fastest path that meets the tolerance {tol:g}" + (
        f" ({', '.join(too_coarse)} round too coarsely for it; see paths)" if too_coarse else ""
    )
    flop_ms, byte_ms = flops / pf * 1e3, nbytes / bw * 1e3
    sol = max(flop_ms, byte_ms)
    r = Roofline(
        flops=flops,
        bytes=nbytes,
        dtype=dtype,
        path=path,
        path_reason=reason,
        paths=paths,
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


def with_measured(r: Roofline, measured_ms: float | None) -> Roofline:
    """Attach a measured time. One below the bound is a finding about the model, not a fraction over 1."""
    r.measured_ms = measured_ms
    r.fraction_of_sol, r.below_bound = None, False
    r.notes = [n for n in r.notes if not n.startswith("measured ")]
    if measured_ms and measured_ms > 0:
        if measured_ms < r.sol_ms:
            r.below_bound = True
            r.notes.append(
                f"measured {measured_ms:.4g} ms is below the bound {r.sol_ms:.4g} ms: the model is wrong for "
                f"this kernel (a peak in the {r.device} table, the {r.path} path, or the minimum bytes, e.g. "
                "data served from L2 across calls); no fraction of speed of light is reported"
            )
        else:
            r.fraction_of_sol = r.sol_ms / measured_ms
    return r


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


def count_reference(model, inputs: list) -> tuple[float, float, str]:
    """(flops, minimum bytes, dominant dtype key) of one forward of ``model`` on ``inputs``."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad():
        counter = FlopCounterMode(display=False)
        with counter:
            out = model(*inputs)
    flops = float(counter.get_total_flops())
    read = list(_tensors(inputs)) + list(model.parameters()) + list(model.buffers())
    seen, nbytes, by_dtype = set(), 0.0, {}
    for t in read + list(_tensors(out)):
        key = (t.data_ptr(), t.numel(), t.dtype) if t.device.type != "meta" else id(t)
        if key in seen:
            continue
        seen.add(key)
        size = float(t.numel() * t.element_size())
        nbytes += size
        if t.is_floating_point():
            by_dtype[t.dtype] = by_dtype.get(t.dtype, 0.0) + size
    dtype = dtype_key(max(by_dtype, key=by_dtype.get)) if by_dtype else "fp32"
    return flops, nbytes, dtype


def reference_roofline(
    problem,
    device: str,
    device_name: str | None,
    measured_ms: float | None = None,
    peaks: dict | None = None,
    atol: float | None = None,
    rtol: float | None = None,
) -> Roofline:
    """Build the reference on the meta device when it allows (no memory, no compute), else on ``device``."""
    import torch

    from kforge_mcp.core.problem import seed_everything

    peaks = peaks or {}
    try:
        init = problem.init_inputs("cpu")
        with torch.device("meta"):
            seed_everything(0)
            model = problem.module.Model(*init)
        inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in problem.make_inputs(7, "cpu")]
        flops, nbytes, dtype = count_reference(model, inputs)
    except Exception:  # noqa: BLE001  (data-dependent models cannot run on meta: run it for real)
        seed_everything(0)
        model = problem.module.Model(*problem.init_inputs(device)).to(device)
        flops, nbytes, dtype = count_reference(model, problem.make_inputs(7, device))
    return make_roofline(
        flops, nbytes, dtype, device_name, measured_ms, peaks.get("flops"), peaks.get("bandwidth"), atol, rtol
    )
