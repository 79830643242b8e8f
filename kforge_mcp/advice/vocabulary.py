"""Every vendor-specific name the advice reads, in one place: NVIDIA's pipes, stalls, SMs, memory
sectors, library kernel names and architectures, Intel's vector-engine counters, and how a report
tells its vendor. Rules and kinds read these; nothing else in advice/ spells a vendor's term.

Library kernel names carry the path: cuBLAS/CUTLASS ``sm80_xmma_gemm_f32f32_...`` (fp32 on the FMA
pipe), ``..._tf32...``, ``...bf16...``, ``sm90_...`` / ``gmma`` (Hopper wgmma), ``ampere_sgemm``
(FMA), ``s1688gemm`` / ``s16816gemm`` (mma.sync), cuBLASLt ``nvjet_[sm90_]<in><acc><out>_...``
(Hopper wgmma kernels; ``h`` fp16, ``t`` bf16 (a bf16 8192^3 torch.matmul ran
``nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT`` on Hopper), ``s`` fp32, ``e``/``q`` fp8), cuDNN
``cudnn`` / ``implicit_gemm`` / ``fprop`` (convolutions), PyTorch's ``elementwise_kernel`` and
``reduce_kernel``. Triton kernels carry the user's name, so for them the metrics decide.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kforge_mcp.profiling.report import ProfileReport

# ---- NVIDIA: units, stalls, SMs (Nsight Compute's metric names) ----

WGMMA_PIPE, HMMA_PIPE = "tensor_op_gmma", "tensor_op_hmma"
TENSOR_PIPES = (WGMMA_PIPE, HMMA_PIPE, "tensor_op_imma")
TMA_PIPE = "tma"  # the copy engine's pipe: busy when operands arrive by TMA, not by loads
FMA_PIPE, ALU_PIPE = "fma", "alu"
PIPE_UNIT = {WGMMA_PIPE: "wgmma", HMMA_PIPE: "hmma"}  # the MMA instruction family each tensor pipe runs
PTX_MMA = {2.0: "wgmma", 1.0: "hmma"}  # metrics["ptx_mma"] (targets/triton): 2 wgmma.mma_async, 1 mma.sync, 0 none
PTX_MMA_INSTRUCTION = {"wgmma": "wgmma.mma_async", "hmma": "mma.sync"}
WGMMA_INSTRUCTIONS = "inst_pipe_tensor_op_gmma_pct"  # metrics: executed wgmma instructions, % of peak (0: none)
TENSOR_CYCLES = "tensor_cycles_pct"  # metrics: the tensor cores' own busy cycles (the hmma pipe's counter also
# counts the fp16 and shared work that issues through its pipe: an FMA-only conv read 3.26% there, 0.06% here)
COMPILED_MMA = {"wgmma": "wgmma", "mma.sync": "hmma"}  # KernelResources.mma (the compile report) -> unit
GLOBAL_LATENCY_STALLS = ("long_scoreboard", "lg_throttle")  # warps waiting on global memory
SHARED_STALLS = ("short_scoreboard", "mio_throttle")  # warps waiting on shared memory (the MIO pipe)
SHARED_PIPE_STALLS = (*SHARED_STALLS, "barrier")  # ... or on each other at a barrier around shared memory
DEFAULT_SM_COUNT = 132  # H100 SXM; used when the profile does not say
WARP_SIZE = 32  # threads a warp

# Global memory moves in 32-byte sectors; a warp's coalesced 4-byte access is 128 bytes = 4 sectors per request,
# and 16-byte vector accesses legitimately touch 16 sectors per request
SECTOR_BYTES = 32
COALESCED_SECTORS_PER_REQUEST = 4
VECTOR_SECTORS_PER_REQUEST = 16


@dataclass(frozen=True)
class SmLimits:
    """What one SM holds at once (CUDA C++ Programming Guide, the compute capabilities' technical specifications)."""

    registers: int  # 32-bit registers per SM
    shared_bytes: int  # shared memory per SM
    warps: int  # resident warps per SM
    blocks: int  # resident blocks per SM


SM_LIMITS = {
    "sm_80": SmLimits(65536, 164 * 1024, 64, 32),
    "sm_86": SmLimits(65536, 100 * 1024, 48, 16),
    "sm_89": SmLimits(65536, 100 * 1024, 48, 24),
    "sm_90": SmLimits(65536, 228 * 1024, 64, 32),
    "sm_100": SmLimits(65536, 228 * 1024, 64, 32),
}
ARCH_BY_DEVICE = {  # the arch a device of the peaks table (judge/roofline/peaks.py) compiles for
    "H100 SXM": "sm_90a",
    "H100 PCIe": "sm_90a",
    "H100 NVL": "sm_90a",
    "H200": "sm_90a",
    "A100 80GB": "sm_80",
    "A100 40GB": "sm_80",
    "L40S": "sm_89",
    "RTX 4090": "sm_89",
    "B200": "sm_100a",
}


def sm_limits(arch: str | None) -> SmLimits | None:
    """The SM limits of an arch such as 'sm_90a'; None for one not listed."""
    m = re.fullmatch(r"(sm_\d+)a?", (arch or "").strip().lower())
    return SM_LIMITS.get(m.group(1)) if m else None


# ---- NVIDIA library kernel names ----

GEMM_NAME = re.compile(
    r"gemm|matmul|_mm_|^mm_|_mm$|sgemm|hgemm|xmma|nvjet|cutlass|cublas|wgmma|gmma|dot_kernel|linear", re.I
)
CONV_NAME = re.compile(r"cudnn|conv|fprop|dgrad|wgrad|implicit_gemm|winograd", re.I)
REDUCE_NAME = re.compile(r"reduce|softmax|norm|sum_|_sum|mean|argmax|max_kernel|scan|cumsum", re.I)
ELEMENTWISE_NAME = re.compile(r"elementwise|vectorized|unrolled|pointwise|triton_poi|add_|relu|gelu|bias|scale", re.I)
COPY_NAME = re.compile(r"memcpy|memset|copy|transpose|permute|gather|scatter|index", re.I)
MEMCPY_NAME = re.compile(r"memcpy|memset", re.I)
MEMCPY_METRIC = "memcpy_or_memset"  # the torch trace's marker of a copy or set, not a kernel
WGMMA_NAME = re.compile(r"sm9\d|gmma|nvjet", re.I)  # library kernels that run wgmma
_NVJET = re.compile(r"nvjet_(?:sm\d+_)?([a-z])([a-z])([a-z])_")
_NVJET_IN = {"s": "fp32", "t": "bf16", "h": "fp16", "b": "bf16", "e": "fp8", "q": "fp8"}


def name_path(name: str) -> str | None:
    """The operand type / unit a library kernel's name states, or None."""
    n = name.lower()
    jet = _NVJET.search(n)
    if jet:
        return _NVJET_IN.get(jet.group(1))
    if "tf32" in n or "s1688gemm" in n:
        return "tf32"
    if "e4m3" in n or "e5m2" in n or "fp8" in n:
        return "fp8"
    if "bf16" in n:
        return "bf16"
    if re.search(r"f16f16|h16816|_h1688|hgemm|fp16|half", n):
        return "fp16"
    if re.search(r"f32f32|sgemm|ffma|simt", n):
        return "fp32"
    return None


# ---- Intel: vector-engine counters (unitrace --metric-query, profiling/unitrace.py) ----

XVE_STALL, XVE_IDLE, XVE_ACTIVE = "xve_stall_pct", "xve_idle_pct", "xve_active_pct"
XVE_STALL_REASON_PREFIX = "xve_stall_"
GPU_MEMORY_GBPS, WORK_GROUPS = "gpu_memory_gbps", "work_groups"

# ---- which vendor a report comes from ----

_NVIDIA_NAME = re.compile(r"nvidia|geforce|tesla|rtx|h100|h200|a100|l40|b200", re.I)


def nvidia_device(name: str | None) -> bool:
    """A device name of NVIDIA's ('NVIDIA H100 80GB HBM3', the peaks table's 'H200')."""
    return bool(name and _NVIDIA_NAME.search(name))


def report_vendor(report: ProfileReport) -> str | None:
    """'nvidia', 'intel', 'apple' or 'cpu' from the report's device, device name and profiler; None when unknown."""
    device, name, source = (report.device or "").lower(), report.device_name or "", report.source.lower()
    if device.startswith("cuda") or "ncu" in source or nvidia_device(name):
        return "nvidia"
    if device.startswith("xpu") or "unitrace" in source or "intel" in name.lower():
        return "intel"
    if device.startswith("mps") or "xctrace" in source or "apple" in name.lower():
        return "apple"
    if device.startswith("cpu"):
        return "cpu"
    return None
