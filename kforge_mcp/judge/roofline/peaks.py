"""Device peaks: the dense rates of each compute format and the memory bandwidth, per device, from the
vendors' datasheets, and the names a device goes by."""

from __future__ import annotations

from dataclasses import dataclass, field

from kforge_mcp.core.errors import InputError


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
