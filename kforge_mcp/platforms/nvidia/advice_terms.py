"""The words NVIDIA's profiles speak, as the analysis rules read them (the platform's ``vocabulary``): Nsight
Compute's pipes, stalls and metric keys, the SMs, global memory's sectors, the MMA units and their PTX, and what
the libraries' kernel names say.

Library kernel names carry the path: cuBLAS/CUTLASS ``sm80_xmma_gemm_f32f32_...`` (fp32 on the FMA pipe),
``..._tf32...``, ``...bf16...``, ``sm90_...`` / ``gmma`` (Hopper wgmma), ``ampere_sgemm`` (FMA), ``s1688gemm`` /
``s16816gemm`` (mma.sync), cuBLASLt ``nvjet_[sm90_]<in><acc><out>_...`` (Hopper wgmma kernels; ``h`` fp16, ``t``
bf16 (a bf16 8192^3 torch.matmul ran ``nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT`` on Hopper), ``s`` fp32,
``e``/``q`` fp8), cuDNN ``cudnn`` / ``implicit_gemm`` / ``fprop`` (convolutions), PyTorch's ``elementwise_kernel``
and ``reduce_kernel``. Triton kernels carry the user's name, so for them the metrics decide.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kforge_mcp.platforms.base import CompiledMma, KernelNames, MmaCounter, SmLimits, Vocabulary

WGMMA_PIPE, HMMA_PIPE = "tensor_op_gmma", "tensor_op_hmma"

# What one SM holds at once (CUDA C++ Programming Guide, the compute capabilities' technical specifications)
SM_LIMITS = {
    "sm_80": SmLimits(65536, 164 * 1024, 64, 32),
    "sm_86": SmLimits(65536, 100 * 1024, 48, 16),
    "sm_89": SmLimits(65536, 100 * 1024, 48, 24),
    "sm_90": SmLimits(65536, 228 * 1024, 64, 32),
    "sm_100": SmLimits(65536, 228 * 1024, 64, 32),
}
ARCH_BY_DEVICE = {  # the arch a device of the peaks table (peaks.toml) compiles for
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


@dataclass(frozen=True)
class NvidiaVocabulary(Vocabulary):
    """NVIDIA's names say more than the contract's defaults: the arch family's limits ('sm_90a' is sm_90's), the
    operand type of a library kernel, and whether it runs wgmma."""

    def limits(self, arch: str | None) -> SmLimits | None:
        m = re.fullmatch(r"(sm_\d+)a?", (arch or "").strip().lower())
        return self.sm_limits.get(m.group(1)) if m else None

    def name_operand(self, name: str) -> str | None:
        return name_path(name)

    def name_unit(self, name: str) -> str | None:
        return "wgmma" if WGMMA_NAME.search(name) else "hmma"


VOCABULARY = NvidiaVocabulary(
    tensor_pipes=(WGMMA_PIPE, HMMA_PIPE, "tensor_op_imma"),
    copy_pipe="tma",
    pipe_units={WGMMA_PIPE: "wgmma", HMMA_PIPE: "hmma"},
    mma_pipe=WGMMA_PIPE,
    alu_pipe="alu",
    convert_metric="inst_pipe_xu_pct",  # the XU pipe: F2F/F2FP conversions and MUFU transcendentals
    serialized_mma_metric="wgmma_serialized",  # ptxas C7514/C7515 on the kernel's PTX (targets/nvidia.py)
    polynomial_log_metric="ptx_polynomial_logs",  # libdevice's logf copies in the kernel's PTX (targets/nvidia.py)
    special_function_lanes=16 / 128,  # an SM's 16 MUFU results a cycle against its 128 FP32 lanes (sm_80, sm_90)
    superseded_mma_units=("hmma",),  # mma.sync, under Hopper's warpgroup MMAs
    issued_mma=MmaCounter("inst_pipe_tensor_op_gmma_pct", "wgmma"),  # executed wgmma instructions (0: none)
    # the tensor cores' own busy cycles: the hmma pipe's counter also counts the fp16 and shared work that issues
    # through its pipe (an FMA-only conv read 3.26% there, 0.06% here)
    tensor_cycles=MmaCounter("tensor_cycles_pct", "hmma"),
    compiled_mma=CompiledMma(  # metrics["ptx_mma"] (targets/triton): 2 wgmma.mma_async, 1 mma.sync, 0 none
        "ptx_mma", "PTX", {2.0: "wgmma", 1.0: "hmma"}, {"wgmma": "wgmma.mma_async", "hmma": "mma.sync"}
    ),
    global_latency_stalls=("long_scoreboard", "lg_throttle"),
    shared_stalls=("short_scoreboard", "mio_throttle"),  # the MIO pipe
    barrier_stalls=("barrier",),
    default_sm_count=132,  # H100 SXM's, where a profile does not say
    default_sm_count_of="H100",
    warp_size=32,
    sm_limits=SM_LIMITS,
    arch_by_device=ARCH_BY_DEVICE,
    # global memory moves in 32-byte sectors; a warp's coalesced 4-byte access is 128 bytes = 4 sectors per request,
    # and 16-byte vector accesses legitimately touch 16 sectors per request
    sector_bytes=32,
    coalesced_sectors_per_request=4,
    vector_sectors_per_request=16,
    kernel_names=KernelNames().extended(
        gemm=r"sgemm|hgemm|xmma|nvjet|cutlass|cublas|wgmma|gmma", conv=r"cudnn|fprop|dgrad|wgrad"
    ),
)
