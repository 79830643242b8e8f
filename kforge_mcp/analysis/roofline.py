"""Speed of light for a reference forward: FLOPs from torch's FlopCounterMode, minimum bytes
(inputs and parameters read once, outputs written once), and a table of device peaks.

T_SOL = max(flops / peak_flops(dtype), bytes / peak_bandwidth).

FlopCounterMode counts matmul, convolution and attention FLOPs only: element-wise ops and
reductions count 0, so such problems come out memory-bound (they nearly always are).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .report import Roofline


@dataclass(frozen=True)
class Peaks:
    name: str
    bandwidth: float  # bytes/s
    flops: dict[str, float] = field(default_factory=dict)  # dtype -> FLOP/s (dense)
    note: str = ""


T, G = 1e12, 1e9
# Public dense figures (no sparsity). fp32 is the non-tensor rate; tf32 / bf16 / fp16 / fp8 use tensor cores.
DEVICE_PEAKS: dict[str, Peaks] = {p.name: p for p in [
    Peaks("H100 SXM", 3.35 * T, {"fp32": 67 * T, "tf32": 495 * T, "bf16": 989 * T, "fp16": 989 * T, "fp8": 1979 * T, "fp64": 67 * T}),
    Peaks("H100 PCIe", 2.0 * T, {"fp32": 51 * T, "tf32": 378 * T, "bf16": 756 * T, "fp16": 756 * T, "fp8": 1513 * T, "fp64": 51 * T}),
    Peaks("H200", 4.8 * T, {"fp32": 67 * T, "tf32": 495 * T, "bf16": 989 * T, "fp16": 989 * T, "fp8": 1979 * T, "fp64": 67 * T}),
    Peaks("A100 80GB", 2.039 * T, {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T, "fp64": 19.5 * T}),
    Peaks("A100 40GB", 1.555 * T, {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T, "fp64": 19.5 * T}),
    Peaks("L40S", 0.864 * T, {"fp32": 91.6 * T, "tf32": 183 * T, "bf16": 362 * T, "fp16": 362 * T, "fp8": 733 * T}),
    Peaks("RTX 4090", 1.008 * T, {"fp32": 82.6 * T, "tf32": 82.6 * T, "bf16": 165 * T, "fp16": 165 * T, "fp8": 330 * T},
          "fp16/bf16 with fp32 accumulate"),
    Peaks("B200", 8.0 * T, {"fp32": 75 * T, "tf32": 1100 * T, "bf16": 2250 * T, "fp16": 2250 * T, "fp8": 4500 * T},
          "HGX B200 per-GPU figures; fp32 approximate"),
    Peaks("Intel Arc B580", 456 * G, {"fp32": 13.7 * T, "tf32": 13.7 * T, "bf16": 117 * T, "fp16": 117 * T},
          "XMX dense fp16/bf16; fp32 from 20 Xe2 cores at 2.67 GHz"),
    Peaks("Apple M1", 68.25 * G, {"fp32": 2.6 * T, "fp16": 2.6 * T, "bf16": 2.6 * T}),
    Peaks("Apple M2", 100 * G, {"fp32": 3.6 * T, "fp16": 3.6 * T, "bf16": 3.6 * T}),
    Peaks("Apple M3", 100 * G, {"fp32": 4.1 * T, "fp16": 4.1 * T, "bf16": 4.1 * T}),
    Peaks("Apple M4", 120 * G, {"fp32": 4.3 * T, "fp16": 4.3 * T, "bf16": 4.3 * T}),
    Peaks("Apple M3 Max", 400 * G, {"fp32": 16.4 * T, "fp16": 16.4 * T, "bf16": 16.4 * T}),
    Peaks("Apple M4 Max", 546 * G, {"fp32": 18.4 * T, "fp16": 18.4 * T, "bf16": 18.4 * T}),
    Peaks("Apple M2 Ultra", 800 * G, {"fp32": 27.2 * T, "fp16": 27.2 * T, "bf16": 27.2 * T}),
    Peaks("CPU (generic)", 50 * G, {"fp32": 1 * T, "fp16": 1 * T, "bf16": 1 * T, "fp64": 0.5 * T},
          "placeholder figures: a CPU roofline here is a rough guide only"),
]}  # fmt: skip
DEFAULT_DEVICE = "H100 SXM"

_ALIASES = [  # (substrings that must all appear in the lowercased name, table key), first match wins
    (("h100", "pcie"), "H100 PCIe"), (("h100",), "H100 SXM"), (("h200",), "H200"), (("gh200",), "H200"),
    (("a100", "40gb"), "A100 40GB"), (("a100",), "A100 80GB"), (("l40s",), "L40S"), (("4090",), "RTX 4090"),
    (("b200",), "B200"), (("b580",), "Intel Arc B580"), (("m4 max",), "Apple M4 Max"), (("m3 max",), "Apple M3 Max"),
    (("m2 ultra",), "Apple M2 Ultra"), (("apple m4",), "Apple M4"), (("apple m3",), "Apple M3"),
    (("apple m2",), "Apple M2"), (("apple m1",), "Apple M1"), (("mps",), "Apple M2"), (("sm_90",), "H100 SXM"),
    (("sm_100",), "B200"), (("sm_80",), "A100 80GB"), (("sm_89",), "L40S"), (("cpu",), "CPU (generic)"),
]  # fmt: skip


def lookup_peaks(device_name: str | None) -> tuple[Peaks, str | None]:
    """The table entry for a device name; a note when it was a guess."""
    name = (device_name or "").lower()
    if name:
        for key in DEVICE_PEAKS:
            if key.lower() == name:
                return DEVICE_PEAKS[key], None
        for needles, key in _ALIASES:
            if all(n in name for n in needles):
                note = None if key.lower().split()[0] in name or "apple" in key.lower() else f"'{device_name}' taken as {key}"
                return DEVICE_PEAKS[key], note
    return DEVICE_PEAKS[DEFAULT_DEVICE], f"device '{device_name or 'unknown'}' not in the peaks table: {DEFAULT_DEVICE} figures used"


def dtype_key(dtype) -> str:
    s = str(dtype).replace("torch.", "")
    return {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
            "float64": "fp64", "double": "fp64"}.get(s, "fp8" if "float8" in s else "fp32")  # fmt: skip


def make_roofline(flops: float, nbytes: float, dtype: str = "fp32", device_name: str | None = None,
                  measured_ms: float | None = None, peak_flops: float | None = None,
                  peak_bandwidth: float | None = None, allow_tf32: bool = False) -> Roofline:  # fmt: skip
    peaks, note = lookup_peaks(device_name)
    notes = [note] if note else []
    key = "tf32" if dtype == "fp32" and allow_tf32 and "tf32" in peaks.flops else dtype
    pf = peak_flops or peaks.flops.get(key) or peaks.flops.get("fp32")
    bw = peak_bandwidth or peaks.bandwidth
    if peak_flops or peak_bandwidth:
        notes.append("peaks overridden by the caller")
    if peaks.note:
        notes.append(f"{peaks.name}: {peaks.note}")
    flop_ms, byte_ms = flops / pf * 1e3, nbytes / bw * 1e3
    sol = max(flop_ms, byte_ms)
    r = Roofline(flops=flops, bytes=nbytes, dtype=key, device=peaks.name, peak_flops=pf, peak_bandwidth=bw,
                 sol_ms=sol, flop_ms=flop_ms, byte_ms=byte_ms, bound="compute" if flop_ms > byte_ms else "memory",
                 notes=notes)  # fmt: skip
    if flops == 0:
        r.notes.append("FlopCounterMode counted 0 FLOPs (it counts matmul/conv/attention only): the bound is memory")
    return with_measured(r, measured_ms)


def with_measured(r: Roofline, measured_ms: float | None) -> Roofline:
    r.measured_ms = measured_ms
    r.fraction_of_sol = (r.sol_ms / measured_ms) if measured_ms and measured_ms > 0 else None
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


def reference_roofline(problem, device: str, device_name: str | None, measured_ms: float | None = None,
                       peaks: dict | None = None) -> Roofline:  # fmt: skip
    """Build the reference on the meta device when it allows (no memory, no compute), else on ``device``."""
    import torch

    from ..problem import seed_everything

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
    return make_roofline(flops, nbytes, dtype, device_name, measured_ms, peaks.get("flops"), peaks.get("bandwidth"),
                         bool(torch.backends.cuda.matmul.allow_tf32))  # fmt: skip
