"""What a kernel is and which unit does its math, told from its name and, when the profile has
them, its pipe metrics. Rules need this: a Hopper tensor-core GEMM at 12% occupancy is normal,
an fp32 GEMM on the FMA pipe is leaving tensor cores idle, an element-wise kernel lives on DRAM.

Library names carry the path: cuBLAS/CUTLASS ``sm80_xmma_gemm_f32f32_...`` (fp32 on the FMA
pipe), ``..._tf32...``, ``...bf16...``, ``sm90_...`` / ``gmma`` (Hopper wgmma), ``ampere_sgemm``
(FMA), ``s1688gemm`` / ``s16816gemm`` (mma.sync), cuBLASLt ``nvjet_[sm90_]<in><acc><out>_...``
(Hopper wgmma kernels; ``h`` fp16, ``t`` bf16 (a bf16 8192^3 torch.matmul ran
``nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT`` on Hopper), ``s`` fp32, ``e``/``q`` fp8), cuDNN
``cudnn`` / ``implicit_gemm`` / ``fprop`` (convolutions), PyTorch's ``elementwise_kernel`` and
``reduce_kernel``. Triton kernels carry the user's name, so for them the metrics decide.
"""

from __future__ import annotations

import re

from kforge_mcp.profiling.report import KernelProfile

TENSOR_PIPES = ("tensor_op_gmma", "tensor_op_hmma", "tensor_op_imma")
BUSY_TENSOR_PCT = 2.0  # a named GEMM with a tensor pipe above this uses it (an fp32 FMA GEMM reads 0)
GEMM_BY_PIPE_PCT = 10.0  # an unnamed kernel is a GEMM when a tensor pipe is this busy (the hmma pipe shares
# its counter with fp16 math: an element-wise kernel can read 4-8%)

_GEMM = re.compile(
    r"gemm|matmul|_mm_|^mm_|_mm$|sgemm|hgemm|xmma|nvjet|cutlass|cublas|wgmma|gmma|dot_kernel|linear", re.I
)
_CONV = re.compile(r"cudnn|conv|fprop|dgrad|wgrad|implicit_gemm|winograd", re.I)
_REDUCE = re.compile(r"reduce|softmax|norm|sum_|_sum|mean|argmax|max_kernel|scan|cumsum", re.I)
_ELEMENTWISE = re.compile(r"elementwise|vectorized|unrolled|pointwise|triton_poi|add_|relu|gelu|bias|scale", re.I)
_COPY = re.compile(r"memcpy|memset|copy|transpose|permute|gather|scatter|index", re.I)
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


def busiest_tensor_pipe(k: KernelProfile) -> tuple[str | None, float]:
    pipes = [(p, k.pipes[p]) for p in TENSOR_PIPES if p in k.pipes]
    if not pipes and k.tensor_pipe_pct is not None:
        pipes = [("tensor", k.tensor_pipe_pct)]
    return max(pipes, key=lambda x: x[1]) if pipes else (None, 0.0)


def classify(
    k: KernelProfile, flops_known: bool = False, conv_problem: bool = False, hottest: bool = False
) -> KernelProfile:
    """Fill k.category, k.compute_path and k.kind_basis (in place; returns k). ``conv_problem``: the problem's
    FLOPs are mostly a convolution's, so a kernel that runs MMAs under a name that says nothing is its convolution
    (the gmma counter and the PTX count MMAs alone, so any activity there says so); ``hottest``: the kernel is
    taken as the convolution where no name or metric places it (classify_all)."""
    name = k.name
    pipe, busy = busiest_tensor_pipe(k)
    by_name = name_path(name)
    gemm_name = bool(_GEMM.search(name)) and not _CONV.search(name)
    mma = k.pipes.get("tensor_op_gmma", 0.0) >= BUSY_TENSOR_PCT or k.metrics.get("ptx_mma", 0.0) > 0
    basis = []
    if _CONV.search(name):
        kind = "conv"
        basis.append("name")
    elif gemm_name:
        kind = "gemm"
        basis.append("name")
    elif (pipe and busy >= GEMM_BY_PIPE_PCT) or (conv_problem and mma):
        kind = "conv" if conv_problem else "gemm"
        basis.append(f"{pipe} pipe {busy:.0f}%" if pipe else "PTX MMA instructions")
        if conv_problem:
            basis.append("the problem's convolution FLOPs")
    elif "memcpy_or_memset" in k.metrics or re.search(r"memcpy|memset", name, re.I):
        kind = "copy"
        basis.append("name")
    elif _REDUCE.search(name) or _ELEMENTWISE.search(name) or _COPY.search(name):
        kind = "reduction" if _REDUCE.search(name) else "elementwise" if _ELEMENTWISE.search(name) else "copy"
        basis.append("name")
    elif flops_known and (k.fma_pipe_pct or 0) >= 30:
        kind = "conv" if conv_problem else "gemm"  # a user-named kernel of a problem with FLOPs, busy on the FMA pipe
        basis.append(f"the problem's {'convolution' if conv_problem else 'matmul'} FLOPs")
    elif conv_problem and hottest:
        kind = "conv"
        basis.append("the problem's convolution FLOPs: its longest kernel")
    else:
        kind = "other"
    path = None
    if kind in ("gemm", "conv") and pipe and busy >= BUSY_TENSOR_PCT and k.pipes:
        unit = "wgmma" if pipe == "tensor_op_gmma" else "hmma" if pipe == "tensor_op_hmma" else pipe
        path = f"{unit} ({by_name})" if by_name and by_name != "fp32" else unit
        basis.append(f"{pipe} {busy:.0f}%")
    elif kind in ("gemm", "conv") and "ptx_mma" in k.metrics:  # a Triton kernel's PTX, when no pipe metrics
        path = {2.0: "wgmma", 1.0: "hmma"}.get(k.metrics["ptx_mma"], "fma")
        basis.append("PTX: " + {"wgmma": "wgmma.mma_async", "hmma": "mma.sync"}.get(path, "no MMA instructions"))
    elif kind in ("gemm", "conv"):
        if pipe is not None or k.fma_pipe_pct is not None:  # metrics say: no tensor pipe in use
            path = "fma"
            basis.append(
                f"tensor pipes {busy:.0f}%" + (f", FMA {k.fma_pipe_pct:.0f}%" if k.fma_pipe_pct is not None else "")
            )
        elif by_name:
            path = "fma" if by_name == "fp32" else ("wgmma" if re.search(r"sm9\d|gmma|nvjet", name, re.I) else "hmma")
            path = path if by_name == "fp32" else f"{path} ({by_name})"
    k.category, k.compute_path = kind, path
    k.kind_basis = ", ".join(dict.fromkeys(basis)) or None
    return k


def classify_all(kernels: list[KernelProfile], flops_known: bool = False, conv_problem: bool = False) -> None:
    """classify each kernel; in a convolution problem where none is a GEMM or convolution by name or metrics, the
    one that takes the most time and no name places elsewhere does the convolution's FLOPs (a single fused kernel)."""
    for k in kernels:
        classify(k, flops_known, conv_problem)
    if conv_problem and not any(k.category in ("gemm", "conv") for k in kernels):
        hot = max((k for k in kernels if k.category == "other"), key=lambda k: k.device_ms, default=None)
        if hot is not None:
            classify(hot, flops_known, conv_problem, hottest=True)


def is_tensor_gemm(k: KernelProfile) -> bool:
    return k.category in ("gemm", "conv") and bool(k.compute_path) and k.compute_path != "fma"


def is_fma_gemm(k: KernelProfile) -> bool:
    return k.category in ("gemm", "conv") and k.compute_path == "fma"


# A latency-bound kernel: few issue slots used, no busy math pipe, DRAM far from its peak, and warps waiting on
# global memory. Its tensor pipe (if any) idles for that reason, so feeding it is not the lever; more bytes in flight
# per SM and more independent work per program are (gather-style convs: tensor pipe 6-12% busy, DRAM 3-16%).
LATENCY_ISSUE_PCT = 40.0
LATENCY_PIPE_PCT = 30.0
LATENCY_DRAM_PCT = 40.0
LATENCY_MEMORY_PCT = 60.0  # nor L1/shared: a GEMM at 80% memory throughput waits on shared memory, not on latency
LATENCY_STALLS = ("long_scoreboard", "lg_throttle")


def is_latency_bound(k: KernelProfile) -> bool:
    if k.issue_active_pct is None or not k.top_stalls:
        return False
    _, tensor = busiest_tensor_pipe(k)
    return (
        k.issue_active_pct < LATENCY_ISSUE_PCT
        and max(tensor, k.fma_pipe_pct or 0.0) < LATENCY_PIPE_PCT
        and (k.dram_throughput_pct or 0.0) < LATENCY_DRAM_PCT
        and (k.memory_throughput_pct or 0.0) < LATENCY_MEMORY_PCT
        and k.top_stalls[0].reason in LATENCY_STALLS
    )


def multi_term(path: str | None) -> bool:
    """A path that does each product as several tensor-core products of split operands (3xtf32, bf16x3, ...)."""
    return path is not None and bool(re.search(r"\d+x[a-z]|[a-z]\d*x\d", path))
