"""Kernels with a known bottleneck, for checking kforge's performance analysis against real profiles.

Each case is a function returning ``(run, meta)``: ``run()`` launches the kernel(s) once on CUDA
tensors prepared by the case, and ``meta`` says what the call is (name, ncu kernel regex, analytic
flops and minimum bytes, dtype, tolerances) and what its bottleneck is by design (``label`` and
``why``). The labels were fixed in the table below before any profile was taken; a kernel that
does not behave as designed gets fixed, its label stays.

``run.check()`` (where present) compares the case's output with a torch reference and returns
``{"ok": bool, "max_abs_err": float}`` at the case's tolerances.

Imports only torch, triton and the standard library (the capture runs on a bare GPU machine).
All CUDA kernels live in one ``load_inline`` module, built once per machine into ``EXT_DIR``.

    python bench/analysis/cases.py --manifest   # writes bench/analysis/manifest.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXT_DIR = os.environ.get("KFORGE_ANALYSIS_EXT_DIR", "/tmp/kforge_analysis_ext")

# name: (label, why). Fixed before any capture; see the module docstring.
LABELS: dict[str, tuple[str, str]] = {
    "transpose_naive": (
        "uncoalesced_access",
        "threadIdx.x runs along the input row, so each warp's stores hit 32 different rows of the output "
        "(32 sectors per store request instead of 4) and the DRAM write traffic is sector-granular waste.",
    ),
    "transpose_tiled": (
        "at_the_limit",
        "a padded 32x32 shared-memory tile makes both the global loads and stores coalesced and the shared "
        "accesses conflict-free, so the copy runs near DRAM bandwidth.",
    ),
    "transpose_bank_conflicts": (
        "shared_bank_conflicts",
        "the unpadded 32x32 tile is read down a column, so all 32 lanes of a warp hit the same bank "
        "(32-way conflicts, 32 wavefronts per shared load).",
    ),
    "gather_uncoalesced": (
        "uncoalesced_access",
        "x[idx[i]] with a random permutation: every lane's load lands in a different 32-byte sector, "
        "so each 4-byte load moves a whole sector and the load requests need ~32 sectors each.",
    ),
    "atomics_contention": (
        "atomic_contention",
        "16M threads atomically add into only 8 floats that share one L2 sector, so the L2 atomic unit "
        "serializes them and the SMs mostly wait.",
    ),
    "register_spills": (
        "register_spills",
        "__launch_bounds__(256, 8) caps the kernel at 32 registers while it keeps a dynamically indexed "
        "96-float array and 48 live accumulators, so almost every access goes to local memory.",
    ),
    "gemm_fp32_cublas": (
        "use_tensor_cores",
        "fp32 GEMM with TF32 disabled runs on the FMA pipe (SIMT sgemm); the tensor cores, with an order "
        "of magnitude more throughput, sit idle.",
    ),
    "triton_gemm_fp32": (
        "use_tensor_cores",
        "tl.dot with input_precision='ieee' lowers to FFMA on the FMA pipe, leaving the tensor cores idle.",
    ),
    "triton_gemm_tf32": (
        "feed_tensor_pipe",
        "the TF32 tensor-core path is used, but a plain Triton tile config does not keep the tensor pipe "
        "busy (operand staging and issue limit it well below peak).",
    ),
    "triton_gemm_3xtf32": (
        "feed_tensor_pipe",
        "3xTF32 runs three TF32 MMAs per tile plus the operand splitting on the FMA/ALU pipes, so the "
        "tensor pipe waits on the extra instruction stream and operand feed.",
    ),
    "triton_gemm_bf16": (
        "feed_tensor_pipe",
        "a middling 128x128x64, 4-warp, 3-stage config uses wgmma but cannot feed the tensor pipe as "
        "cuBLAS does (no warp specialization, small warpgroup count).",
    ),
    "cublas_bf16_gemm": (
        "at_the_limit",
        "cuBLAS's Hopper bf16 GEMM keeps the gmma tensor pipe near its peak; little is left to gain.",
    ),
    "softmax_naive": (
        "latency_bound",
        "512 one-warp programs (about 4 warps per SM) each walk their rows in 128-element chunks, three "
        "passes per row with a warp reduction after every load, so only ~2 KB per SM is in flight and "
        "the warps stall on memory latency while DRAM and the SMs stay mostly idle.",
    ),
    "layernorm_tuned": (
        "at_the_limit",
        "one row per program held entirely in registers: x is read once and y written once, so the "
        "kernel streams at close to DRAM bandwidth.",
    ),
    "small_launch_chain": (
        "fuse_launches",
        "8 tiny elementwise kernels on 4096 floats: each runs for a few microseconds, so launch "
        "overhead and gaps dominate; one fused kernel would do it all.",
    ),
}

# ncu -k regex: per case (Triton kernels keep their Python names; cuBLAS names vary by version)
KERNEL_REGEX = {
    "transpose_naive": "transpose_naive_kernel",
    "transpose_tiled": "transpose_tiled_kernel",
    "transpose_bank_conflicts": "transpose_bank_conflicts_kernel",
    "gather_uncoalesced": "gather_kernel",
    "atomics_contention": "atomics_bins_kernel",
    "register_spills": "register_spills_kernel",
    "gemm_fp32_cublas": "gemm|nvjet|xmma|cutlass",
    "triton_gemm_fp32": "gemm_fp32_kernel",
    "triton_gemm_tf32": "gemm_fp32_kernel",
    "triton_gemm_3xtf32": "gemm_fp32_kernel",
    "triton_gemm_bf16": "gemm_bf16_kernel",
    "cublas_bf16_gemm": "gemm|nvjet|xmma|cutlass",
    "softmax_naive": "softmax_naive_kernel",
    "layernorm_tuned": "layernorm_kernel",
    "small_launch_chain": "elementwise",
}

FP32_TOL = 1e-4
BF16_TOL = 1e-2

# ---------------------------------------------------------------------------------------------
# CUDA kernels: one load_inline module
# ---------------------------------------------------------------------------------------------

CUDA_KERNELS = r"""
#include <cuda_runtime.h>
#include <stdint.h>
#define TILE 32
#define ROWS 8
#define SPILL_N 96
#define HOT_N 48

__global__ void transpose_naive_kernel(const float* __restrict__ in, float* __restrict__ out, int n) {
  // threadIdx.x runs along the input row: loads coalesced, stores strided by n (one sector per thread)
  const int x = blockIdx.x * TILE + threadIdx.x;
  const int y = blockIdx.y * TILE + threadIdx.y;
#pragma unroll
  for (int j = 0; j < TILE; j += ROWS) out[(size_t)x * n + (y + j)] = in[(size_t)(y + j) * n + x];
}

template <int PAD>
__device__ __forceinline__ void transpose_tile(const float* __restrict__ in, float* __restrict__ out, int n) {
  __shared__ float tile[TILE][TILE + PAD];
  int x = blockIdx.x * TILE + threadIdx.x;
  int y = blockIdx.y * TILE + threadIdx.y;
#pragma unroll
  for (int j = 0; j < TILE; j += ROWS) tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * n + x];
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x;
  y = blockIdx.x * TILE + threadIdx.y;
#pragma unroll
  for (int j = 0; j < TILE; j += ROWS) out[(size_t)(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}

__global__ void transpose_tiled_kernel(const float* __restrict__ in, float* __restrict__ out, int n) {
  transpose_tile<1>(in, out, n);
}

__global__ void transpose_bank_conflicts_kernel(const float* __restrict__ in, float* __restrict__ out, int n) {
  transpose_tile<0>(in, out, n);
}

__global__ void gather_kernel(const float* __restrict__ x, const int* __restrict__ idx, float* __restrict__ out, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[idx[i]];
}

__global__ void atomics_bins_kernel(const float* __restrict__ x, float* __restrict__ bins, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&bins[i & 7], x[i]);
}

// 8 blocks of 256 threads per SM => at most 32 registers per thread. The array a[] is indexed
// with run-time indices, so it lives in local memory (stack frame); the HOT_N accumulators h[]
// are indexed with constants but are all live at once, far over 32 registers, so ptxas spills them.
__global__ void __launch_bounds__(256, 8) register_spills_kernel(const float* __restrict__ x, float* __restrict__ out, int n, int rounds) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  float a[SPILL_N];
  float h[HOT_N];
#pragma unroll
  for (int k = 0; k < SPILL_N; ++k) a[k] = v * (float)(k + 1) + (float)k;
#pragma unroll
  for (int k = 0; k < HOT_N; ++k) h[k] = v + 0.5f * (float)k;
  int p = i % SPILL_N;
  for (int r = 0; r < rounds; ++r) {
    const int q = (p + 17) % SPILL_N;
    a[p] = a[p] * 0.999f + a[q] * 0.001f;
#pragma unroll
    for (int k = 0; k < HOT_N; ++k) h[k] = (h[k] * (a[(p + k) % SPILL_N] * 0.01f) + h[(k + 1) % HOT_N]) * 0.5f;
    p = (p + 5) % SPILL_N;
  }
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < SPILL_N; ++k) s += a[k];
#pragma unroll
  for (int k = 0; k < HOT_N; ++k) s += h[k];
  out[i] = s;
}
"""

CUDA_LAUNCHERS = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

static void check_f32(const torch::Tensor& t) {
  TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == torch::kFloat32, "want a contiguous CUDA float32 tensor");
}

void transpose_naive(torch::Tensor in, torch::Tensor out) {
  check_f32(in); check_f32(out);
  const int n = (int)in.size(0);
  TORCH_CHECK(in.dim() == 2 && in.size(1) == n && n % TILE == 0, "square, multiple of 32");
  dim3 grid(n / TILE, n / TILE), block(TILE, ROWS);
  transpose_naive_kernel<<<grid, block, 0, c10::cuda::getCurrentCUDAStream()>>>(in.data_ptr<float>(), out.data_ptr<float>(), n);
}

void transpose_tiled(torch::Tensor in, torch::Tensor out) {
  check_f32(in); check_f32(out);
  const int n = (int)in.size(0);
  TORCH_CHECK(in.dim() == 2 && in.size(1) == n && n % TILE == 0, "square, multiple of 32");
  dim3 grid(n / TILE, n / TILE), block(TILE, ROWS);
  transpose_tiled_kernel<<<grid, block, 0, c10::cuda::getCurrentCUDAStream()>>>(in.data_ptr<float>(), out.data_ptr<float>(), n);
}

void transpose_bank_conflicts(torch::Tensor in, torch::Tensor out) {
  check_f32(in); check_f32(out);
  const int n = (int)in.size(0);
  TORCH_CHECK(in.dim() == 2 && in.size(1) == n && n % TILE == 0, "square, multiple of 32");
  dim3 grid(n / TILE, n / TILE), block(TILE, ROWS);
  transpose_bank_conflicts_kernel<<<grid, block, 0, c10::cuda::getCurrentCUDAStream()>>>(in.data_ptr<float>(), out.data_ptr<float>(), n);
}

void gather(torch::Tensor x, torch::Tensor idx, torch::Tensor out) {
  check_f32(x); check_f32(out);
  TORCH_CHECK(idx.is_cuda() && idx.is_contiguous() && idx.scalar_type() == torch::kInt32, "int32 idx");
  const int64_t n = out.numel();
  const int threads = 256;
  gather_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), idx.data_ptr<int>(), out.data_ptr<float>(), n);
}

void atomics_bins(torch::Tensor x, torch::Tensor bins) {
  check_f32(x); check_f32(bins);
  TORCH_CHECK(bins.numel() >= 8, "8 bins");
  const int64_t n = x.numel();
  const int threads = 256;
  atomics_bins_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), bins.data_ptr<float>(), n);
}

void register_spills(torch::Tensor x, torch::Tensor out, int64_t rounds) {
  check_f32(x); check_f32(out);
  const int n = (int)x.numel();
  const int threads = 256;
  register_spills_kernel<<<(n + threads - 1) / threads, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), out.data_ptr<float>(), n, (int)rounds);
}
"""

CPP_DECLS = r"""
#include <torch/extension.h>
void transpose_naive(torch::Tensor in, torch::Tensor out);
void transpose_tiled(torch::Tensor in, torch::Tensor out);
void transpose_bank_conflicts(torch::Tensor in, torch::Tensor out);
void gather(torch::Tensor x, torch::Tensor idx, torch::Tensor out);
void atomics_bins(torch::Tensor x, torch::Tensor bins);
void register_spills(torch::Tensor x, torch::Tensor out, int64_t rounds);
"""

EXT_FUNCTIONS = [
    "transpose_naive",
    "transpose_tiled",
    "transpose_bank_conflicts",
    "gather",
    "atomics_bins",
    "register_spills",
]
_EXT = None


def cuda_ext(verbose: bool = False):
    """The one load_inline module holding every CUDA case (built once into EXT_DIR, then loaded)."""
    global _EXT
    if _EXT is None:
        from torch.utils.cpp_extension import load_inline

        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
        os.makedirs(EXT_DIR, exist_ok=True)
        _EXT = load_inline(
            name="kforge_analysis_cases",
            cpp_sources=CPP_DECLS,
            cuda_sources=CUDA_KERNELS + CUDA_LAUNCHERS,
            functions=EXT_FUNCTIONS,
            extra_cuda_cflags=["-O3", "-lineinfo", "-Xptxas=-v"],
            build_directory=EXT_DIR,
            verbose=verbose,
        )
    return _EXT


# ---------------------------------------------------------------------------------------------
# Triton kernels (fixed configs, no autotune)
# ---------------------------------------------------------------------------------------------

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def gemm_fp32_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    PRECISION: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % group) % group_m)
    pid_n = (pid % group) // group_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc)


@triton.jit
def gemm_bf16_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % group) % group_m)
    pid_n = (pid % group) // group_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.bfloat16))


@triton.jit
def softmax_naive_kernel(x_ptr, y_ptr, ROWS, N, stride, BLOCK: tl.constexpr):
    # one warp per program, a few programs per SM, each walking its rows (pid, pid + grid, ...) in
    # BLOCK-element chunks, three passes per row with a warp reduction after every load
    offs = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), ROWS, tl.num_programs(0)):
        x_row = x_ptr + row * stride
        y_row = y_ptr + row * stride
        m = tl.full((), float("-inf"), tl.float32)
        for start in range(0, N, BLOCK):  # pass 1: max
            v = tl.load(x_row + start + offs)
            m = tl.maximum(m, tl.max(v, axis=0))
        s = tl.zeros((), tl.float32)
        for start in range(0, N, BLOCK):  # pass 2: sum of exp
            v = tl.load(x_row + start + offs)
            s += tl.sum(tl.exp(v - m), axis=0)
        for start in range(0, N, BLOCK):  # pass 3: write
            v = tl.load(x_row + start + offs)
            tl.store(y_row + start + offs, tl.exp(v - m) / s)


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + offs)
    mean = tl.sum(x, axis=0) / N
    xc = x - mean
    var = tl.sum(xc * xc, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + offs)
    b = tl.load(b_ptr + offs)
    tl.store(y_ptr + row * stride + offs, xc * rstd * w + b)


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------


def _meta(name: str, flops: float, nbytes: float, dtype: str, **extra) -> dict:
    label, why = LABELS[name]
    kernel_regex = KERNEL_REGEX[name]
    tol = FP32_TOL if dtype == "fp32" else BF16_TOL
    return {
        "name": name,
        "kernel_regex": kernel_regex,
        "flops": float(flops),
        "bytes": float(nbytes),
        "dtype": dtype,
        "atol": tol,
        "rtol": tol,
        "label": label,
        "why": why,
        **extra,
    }


def _attach_check(run, got, ref, atol: float, rtol: float):
    """run.check(): run once, compare got() with ref() (both computed lazily)."""
    import torch

    def check() -> dict:
        run()
        torch.cuda.synchronize()
        g, r = got().float(), ref().float()
        err = (g - r).abs()
        ok = bool(torch.all(err <= atol + rtol * r.abs()).item())
        return {
            "ok": ok,
            "max_abs_err": float(err.max().item()),
            "max_rel_err": float((err / r.abs().clamp_min(1e-6)).max().item()),
        }

    run.check = check
    return run


def _gen(seed: int = 0):
    import torch

    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    return g


def _transpose(name: str, fn_name: str, n: int = 8192):
    import torch

    x = torch.randn(n, n, device="cuda", generator=_gen())
    y = torch.empty_like(x)
    f = getattr(cuda_ext(), fn_name)

    def run():
        f(x, y)

    meta = _meta(name, 0, 2 * n * n * 4, "fp32", shape=[n, n], threads=[32, 8], elems_per_thread=4)
    return _attach_check(run, lambda: y, lambda: x.t(), FP32_TOL, FP32_TOL), meta


def case_transpose_naive():
    return _transpose("transpose_naive", "transpose_naive")


def case_transpose_tiled():
    return _transpose("transpose_tiled", "transpose_tiled")


def case_transpose_bank_conflicts():
    return _transpose("transpose_bank_conflicts", "transpose_bank_conflicts")


def case_gather_uncoalesced(n: int = 64 * 1024 * 1024):
    import torch

    g = _gen()
    x = torch.randn(n, device="cuda", generator=g)
    idx = torch.randperm(n, device="cuda", generator=g).to(torch.int32)
    out = torch.empty_like(x)
    f = cuda_ext().gather

    def run():
        f(x, idx, out)

    meta = _meta("gather_uncoalesced", 0, n * 4 + n * 4 + n * 4, "fp32", n=n, idx_dtype="int32")
    return _attach_check(run, lambda: out, lambda: x[idx.long()], FP32_TOL, FP32_TOL), meta


def case_atomics_contention(n: int = 16 * 1024 * 1024):
    import torch

    x = torch.rand(n, device="cuda", generator=_gen())
    bins = torch.zeros(8, device="cuda")
    f = cuda_ext().atomics_bins

    def run():
        bins.zero_()
        f(x, bins)

    ref = lambda: x.double().view(-1, 8).sum(0)  # noqa: E731  (bin b = sum of x[i] with i % 8 == b)
    meta = _meta("atomics_contention", n, n * 4 + 8 * 4, "fp32", n=n, bins=8)
    return _attach_check(run, lambda: bins, ref, FP32_TOL, FP32_TOL), meta


def case_register_spills(n: int = 2 * 1024 * 1024, rounds: int = 8):
    import torch

    x = torch.rand(n, device="cuda", generator=_gen()) * 1e-3
    out = torch.empty_like(x)
    f = cuda_ext().register_spills

    def run():
        f(x, out, rounds)

    def ref():  # the kernel's arithmetic, in float64 on the GPU
        spill_n, hot_n = 96, 48
        v = x.double()
        k = torch.arange(spill_n, device="cuda", dtype=torch.float64)
        a = v[:, None] * (k + 1) + k
        h = v[:, None] + 0.5 * torch.arange(hot_n, device="cuda", dtype=torch.float64)
        rows = torch.arange(n, device="cuda")
        p = rows % spill_n
        for _ in range(rounds):
            q = (p + 17) % spill_n
            a[rows, p] = a[rows, p] * 0.999 + a[rows, q] * 0.001
            new_h = h.clone()
            for kk in range(hot_n):
                nxt = (new_h if (kk + 1) % hot_n < kk else h)[:, (kk + 1) % hot_n]
                new_h[:, kk] = (h[:, kk] * (a[rows, (p + kk) % spill_n] * 0.01) + nxt) * 0.5
            h = new_h
            p = (p + 5) % spill_n
        return a.sum(1) + h.sum(1)

    per_thread = 2 * 96 + 2 * 48 + rounds * (3 + 4 * 48) + 96 + 48
    meta = _meta("register_spills", n * per_thread, 2 * n * 4, "fp32", n=n, rounds=rounds, launch_bounds=[256, 8])
    return _attach_check(run, lambda: out, ref, FP32_TOL, FP32_TOL), meta


def _fp32_off():
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    except Exception:  # noqa: BLE001  (older or newer torch without this knob)
        pass


def case_gemm_fp32_cublas(m: int = 1024, n: int = 8192, k: int = 8192):
    import torch

    _fp32_off()
    g = _gen()
    a = torch.randn(m, k, device="cuda", generator=g)
    b = torch.randn(k, n, device="cuda", generator=g)
    c = torch.empty(m, n, device="cuda")

    def run():
        torch.matmul(a, b, out=c)

    meta = _meta(
        "gemm_fp32_cublas", 2 * m * n * k, (m * k + k * n + m * n) * 4, "fp32", shape=[m, n, k], allow_tf32=False
    )
    ref = lambda: a.double() @ b.double()  # noqa: E731
    return _attach_check(run, lambda: c, ref, FP32_TOL, FP32_TOL), meta


TRITON_FP32_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
TRITON_BF16_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}


def _triton_gemm_fp32(name: str, precision: str, m: int = 1024, n: int = 8192, k: int = 8192):
    import torch

    g = _gen()
    a = torch.randn(m, k, device="cuda", generator=g)
    b = torch.randn(k, n, device="cuda", generator=g)
    c = torch.empty(m, n, device="cuda")
    cfg = dict(TRITON_FP32_CONFIG)
    assert m % cfg["BLOCK_M"] == 0 and n % cfg["BLOCK_N"] == 0 and k % cfg["BLOCK_K"] == 0
    grid = ((m // cfg["BLOCK_M"]) * (n // cfg["BLOCK_N"]),)

    def run():
        gemm_fp32_kernel[grid](
            a,
            b,
            c,
            m,
            n,
            k,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            c.stride(0),
            c.stride(1),
            PRECISION=precision,
            **cfg,
        )

    meta = _meta(
        name, 2 * m * n * k, (m * k + k * n + m * n) * 4, "fp32", shape=[m, n, k], input_precision=precision, config=cfg
    )
    ref = lambda: a.double() @ b.double()  # noqa: E731
    return _attach_check(run, lambda: c, ref, FP32_TOL, FP32_TOL), meta


def case_triton_gemm_fp32():
    return _triton_gemm_fp32("triton_gemm_fp32", "ieee")


def case_triton_gemm_tf32():
    return _triton_gemm_fp32("triton_gemm_tf32", "tf32")


def case_triton_gemm_3xtf32():
    return _triton_gemm_fp32("triton_gemm_3xtf32", "tf32x3")


def case_triton_gemm_bf16(m: int = 8192, n: int = 8192, k: int = 8192):
    import torch

    g = _gen()
    a = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", generator=g, dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    cfg = dict(TRITON_BF16_CONFIG)
    grid = ((m // cfg["BLOCK_M"]) * (n // cfg["BLOCK_N"]),)

    def run():
        gemm_bf16_kernel[grid](
            a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), **cfg
        )

    meta = _meta("triton_gemm_bf16", 2 * m * n * k, (m * k + k * n + m * n) * 2, "bf16", shape=[m, n, k], config=cfg)
    ref = lambda: torch.matmul(a, b)  # noqa: E731  (cuBLAS bf16, fp32 accumulate)
    return _attach_check(run, lambda: c, ref, BF16_TOL, BF16_TOL), meta


def case_cublas_bf16_gemm(m: int = 8192, n: int = 8192, k: int = 8192):
    import torch

    g = _gen()
    a = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", generator=g, dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    def run():
        torch.matmul(a, b, out=c)

    meta = _meta("cublas_bf16_gemm", 2 * m * n * k, (m * k + k * n + m * n) * 2, "bf16", shape=[m, n, k])
    # reference on a slice of rows in fp32 (the full fp64 product would take seconds)
    ref = lambda: a[:256].float() @ b.float()  # noqa: E731
    return _attach_check(run, lambda: c[:256], ref, BF16_TOL, BF16_TOL), meta


def case_softmax_naive(rows: int = 4096, cols: int = 8192, block: int = 128, programs: int = 512):
    import torch

    x = torch.randn(rows, cols, device="cuda", generator=_gen())
    y = torch.empty_like(x)

    def run():
        softmax_naive_kernel[(programs,)](x, y, rows, cols, x.stride(0), BLOCK=block, num_warps=1, num_stages=1)

    meta = _meta(
        "softmax_naive",
        7 * rows * cols,
        2 * rows * cols * 4,
        "fp32",
        shape=[rows, cols],
        config={
            "BLOCK": block,
            "num_warps": 1,
            "num_stages": 1,
            "passes": 3,
            "programs": programs,
            "rows_per_program": rows // programs,
        },
    )
    return _attach_check(run, lambda: y, lambda: torch.softmax(x, dim=-1), FP32_TOL, FP32_TOL), meta


def case_layernorm_tuned(rows: int = 8192, cols: int = 8192, num_warps: int = 16):
    import torch

    g = _gen()
    x = torch.randn(rows, cols, device="cuda", generator=g)
    w = torch.randn(cols, device="cuda", generator=g)
    b = torch.randn(cols, device="cuda", generator=g)
    y = torch.empty_like(x)
    eps = 1e-5

    def run():
        layernorm_kernel[(rows,)](x, w, b, y, cols, x.stride(0), eps, BLOCK=cols, num_warps=num_warps, num_stages=1)

    meta = _meta(
        "layernorm_tuned",
        8 * rows * cols,
        (2 * rows * cols + 2 * cols) * 4,
        "fp32",
        shape=[rows, cols],
        config={"BLOCK": cols, "num_warps": num_warps, "num_stages": 1},
    )
    ref = lambda: torch.nn.functional.layer_norm(x, (cols,), w, b, eps)  # noqa: E731
    return _attach_check(run, lambda: y, ref, FP32_TOL, FP32_TOL), meta


def case_small_launch_chain(n: int = 4096):
    import torch

    x = torch.randn(n, device="cuda", generator=_gen())
    holder = {}

    def forward(t):
        t = t * 2.0
        t = t + 1.0
        t = torch.relu(t)
        t = t * 0.5
        t = torch.sigmoid(t)
        t = torch.tanh(t)
        t = t * 3.0
        t = t - 0.25
        return t

    def run():
        holder["y"] = forward(x)

    meta = _meta(
        "small_launch_chain",
        8 * n,
        2 * n * 4,
        "fp32",
        n=n,
        launches=8,
        ops=["mul 2", "add 1", "relu", "mul 0.5", "sigmoid", "tanh", "mul 3", "sub 0.25"],
    )
    ref = lambda: forward(x.double())  # noqa: E731
    return _attach_check(run, lambda: holder["y"], ref, FP32_TOL, FP32_TOL), meta


CASES = {name: globals()[f"case_{name}"] for name in LABELS}
CUDA_EXT_CASES = {
    "transpose_naive",
    "transpose_tiled",
    "transpose_bank_conflicts",
    "gather_uncoalesced",
    "atomics_contention",
    "register_spills",
}


def build(name: str):
    """(run, meta) for one case, on the current CUDA device."""
    return CASES[name]()


def manifest() -> list[dict]:
    return [
        {"name": name, "label": label, "why": why, "cuda_extension": name in CUDA_EXT_CASES}
        for name, (label, why) in LABELS.items()
    ]


if __name__ == "__main__":
    if "--manifest" in sys.argv:
        path = HERE / "manifest.json"
        path.write_text(json.dumps({"cases": manifest()}, indent=1) + "\n")
        print(path)
