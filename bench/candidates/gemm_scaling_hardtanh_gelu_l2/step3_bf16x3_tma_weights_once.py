"""gelu(hardtanh(0.5 * (x @ W^T + b), -2, 2)): bf16x3 as one bf16 GEMM over 3K (the operands split ahead into bf16 hi/lo planes side by side), fed to the tensor cores the way the advice asks: TMA loads (host tensor descriptors) of 128x256x64 tiles (num_warps 8), a 3-stage pipeline, and a persistent grid of one program per SM walking the tiles in grouped order; the epilogue fused as before. TMA feeds the MMA from shared memory as it lands, so the operands are converted to the MMA's type before the GEMM, not inside it.

As step 2, with the weight's bf16 hi/lo planes made once per weight version (kept with the weight's _version and address) instead of every forward.

Follows the top advice on the previous step: "Do the work on weights once per weight version, not every forward": make what the launches on weights alone make once per weight version: keep the result on the module with the version it was made from (each parameter's _version and data_ptr()) and remake it when either changes."""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def gemm_epilogue_kernel(
    a_desc, b_desc, b_ptr, out_ptr, scale_ptr, M, N, K, C0, C1, C2, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, SCALED: tl.constexpr,
):
    # persistent: one program per SM walks the output tiles in grouped order (an A row-panel stays in L2)
    start = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_m * num_n
    in_group = GROUP_M * num_n
    inv_scale = 1.0
    if SCALED:
        inv_scale = 1.0 / (tl.load(scale_ptr) * tl.load(scale_ptr + 1))  # exact: powers of two
    for tile in tl.range(start, num_tiles, NUM_SMS, flatten=True):
        group = tile // in_group
        first_m = group * GROUP_M
        size_m = min(num_m - first_m, GROUP_M)
        pid_m = first_m + (tile % in_group) % size_m
        pid_n = (tile % in_group) // size_m
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = a_desc.load([off_m, k])  # TMA: straight into shared memory, the MMA's operand
            b = b_desc.load([off_n, k])
            acc = tl.dot(a, b.T, acc)
        # the epilogue in two halves: a whole 128x256 fp32 tile staged for the store would need 128 KB of
        # shared memory on top of the pipeline's
        halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        acc0, acc1 = tl.split(halves)
        finish(acc0, off_m, off_n, b_ptr, out_ptr, M, N, stride_om, C0, C1, C2, inv_scale, BLOCK_M, BLOCK_N // 2)
        finish(acc1, off_m, off_n + BLOCK_N // 2, b_ptr, out_ptr, M, N, stride_om, C0, C1, C2, inv_scale, BLOCK_M,
               BLOCK_N // 2)


@triton.jit
def finish(acc, off_m, off_n, b_ptr, out_ptr, M, N, stride_om, C0, C1, C2, inv_scale, BLOCK_M: tl.constexpr,
           BLOCK_N: tl.constexpr):
    rm = off_m + tl.arange(0, BLOCK_M)
    rn = off_n + tl.arange(0, BLOCK_N)
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    y = (acc + bias[None, :]) * C0
    y = tl.minimum(tl.maximum(y, C1), C2)
    y = 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], y, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def split3_kernel(src_ptr, dst_ptr, K, total, HI_FIRST: tl.constexpr, BLOCK: tl.constexpr):
    # fp32 -> bf16 hi and lo planes laid side by side along K, so one bf16 GEMM over 3K sums the three
    # bf16x3 products: x as [lo | hi | hi] against w as [hi | lo | hi] gives lo*hi + hi*lo + hi*hi
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    v = tl.load(src_ptr + offs, mask=mask, other=0.0)
    hi = v.to(tl.bfloat16)
    lo = (v - hi.to(tl.float32)).to(tl.bfloat16)
    row = offs // K
    col = offs % K
    base = dst_ptr + row * (3 * K) + col
    if HI_FIRST:
        tl.store(base, hi, mask=mask)
        tl.store(base + K, lo, mask=mask)
    else:
        tl.store(base, lo, mask=mask)
        tl.store(base + K, hi, mask=mask)
    tl.store(base + 2 * K, hi, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor, hardtanh_min, hardtanh_max):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor
        self.hardtanh_min = hardtanh_min
        self.hardtanh_max = hardtanh_max

    def weight_operand(self, w, K):
        """The weight's [hi | lo | hi] bf16 planes, made once per weight version: they change only when it does."""
        key = (w._version, w.data_ptr())
        if getattr(self, "_bw_key", None) != key:
            N = w.shape[0]
            bw = torch.empty((N, 3 * K), device=w.device, dtype=torch.bfloat16)
            split3_kernel[(triton.cdiv(N * K, 4096),)](w, bw, K, N * K, HI_FIRST=True, BLOCK=4096)
            self._bw, self._bw_key = bw, key
        return self._bw

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w, b = self.gemm.weight, self.gemm.bias
        M, K = x.shape
        N = w.shape[0]
        BM, BN, BK = 128, 256, 64
        out = torch.empty((M, N), device=x.device, dtype=torch.float32)
        a = torch.empty((M, 3 * K), device=x.device, dtype=torch.bfloat16)
        split3_kernel[(triton.cdiv(M * K, 4096),)](x, a, K, M * K, HI_FIRST=False, BLOCK=4096)
        bw = self.weight_operand(w, K)
        scales, SCALED, STAGES = b, False, 3
        num_sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
        tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
        a_desc = TensorDescriptor.from_tensor(a, [BM, BK])
        b_desc = TensorDescriptor.from_tensor(bw, [BN, BK])
        gemm_epilogue_kernel[(min(num_sms, tiles),)](
            a_desc, b_desc, b, out, scales, M, N, a.shape[1], self.scaling_factor, self.hardtanh_min, self.hardtanh_max, out.stride(0),
            BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8, NUM_SMS=min(num_sms, tiles), SCALED=SCALED,
            num_warps=8, num_stages=STAGES,
        )
        return out
