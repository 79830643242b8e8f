"""softmax(gelu(x @ W^T + b), dim=1): fp8 e4m3 operands with power-of-two per-tensor scales (quantized ahead; the scales' amax now a Triton kernel, not torch.amax), fed to the tensor cores the way the advice asks: TMA loads (host tensor descriptors) of 128x256x64 tiles (128x256x128 for fp8), a 3-stage pipeline, and a persistent grid of one program per SM walking the tiles in grouped order; the epilogue fused as before. TMA feeds the MMA from shared memory as it lands, so the operands are converted to the MMA's type before the GEMM, not inside it.

As step 2, with the weight's e4m3 copy and its scale made once per weight version (kept with the weight's _version and address) instead of every forward.

Follows the top advice on the previous step: "Do the work on weights once per weight version, not every forward": make what the launches on weights alone make once per weight version: keep the result on the module with the version it was made from (each parameter's _version and data_ptr()) and remake it when either changes."""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def gemm_epilogue_kernel(
    a_desc, b_desc, b_ptr, out_ptr, scale_ptr, wscale_ptr, M, N, K, C0, C1, C2, stride_om,
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
        inv_scale = 1.0 / (tl.load(scale_ptr) * tl.load(wscale_ptr))  # exact: powers of two
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
    y = acc * inv_scale + bias[None, :]
    y = 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], y, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def amax_kernel(src_ptr, amax_ptr, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.abs(tl.load(src_ptr + offs, mask=offs < total, other=0.0))
    tl.atomic_max(amax_ptr, tl.max(v, 0))


@triton.jit
def to_fp8_kernel(src_ptr, dst_ptr, amax_ptr, scale_ptr, total, BLOCK: tl.constexpr):
    # a power-of-two scale puts the largest magnitude under e4m3's 448 (and is undone exactly)
    amax = tl.maximum(tl.load(amax_ptr), 1e-30)
    scale = tl.exp2(tl.floor(tl.log2(448.0 / amax)))
    if tl.program_id(0) == 0:
        tl.store(scale_ptr, scale)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    v = tl.load(src_ptr + offs, mask=mask, other=0.0)
    tl.store(dst_ptr + offs, (v * scale).to(tl.float8e4nv), mask=mask)


@triton.jit
def row_softmax_kernel(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    # two passes over the row: a running max and sum, then the normalized write
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, N, BLOCK):
        v = tl.load(x_ptr + row * stride + start + cols, mask=start + cols < N, other=float("-inf"))
        m_new = tl.maximum(m, v)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # lanes past the row end stay at 0
        s = s * tl.exp(m - shift) + tl.exp(v - shift)
        m = m_new
    row_max = tl.max(m, 0)
    total = tl.sum(s * tl.exp(m - row_max), 0)
    for start in range(0, N, BLOCK):
        v = tl.load(x_ptr + row * stride + start + cols, mask=start + cols < N, other=0.0)
        tl.store(out_ptr + row * stride + start + cols, tl.exp(v - row_max) / total, mask=start + cols < N)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def weight_operand(self, w):
        """The weight in e4m3 with its power-of-two scale, made once per weight version: they change only when
        the weight does."""
        key = (w._version, w.data_ptr())
        if getattr(self, "_bw_key", None) != key:
            n = w.numel()
            amax = torch.zeros(1, device=w.device, dtype=torch.float32)
            wscale = torch.empty(1, device=w.device, dtype=torch.float32)
            bw = torch.empty(w.shape, device=w.device, dtype=torch.float8_e4m3fn)
            amax_kernel[(triton.cdiv(n, 8192),)](w, amax, n, BLOCK=8192)
            to_fp8_kernel[(triton.cdiv(n, 4096),)](w, bw, amax, wscale, n, BLOCK=4096)
            self._bw, self._wscale, self._bw_key = bw, wscale, key
        return self._bw, self._wscale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w, b = self.linear.weight, self.linear.bias
        M, K = x.shape
        N = w.shape[0]
        BM, BN, BK = 128, 256, 64
        out = torch.empty((M, N), device=x.device, dtype=torch.float32)
        BK = 128  # fp8: 128 bytes of K per row, as bf16's 64
        a = torch.empty((M, K), device=x.device, dtype=torch.float8_e4m3fn)
        amax = torch.zeros(1, device=x.device, dtype=torch.float32)
        scales = torch.empty(1, device=x.device, dtype=torch.float32)
        amax_kernel[(triton.cdiv(M * K, 8192),)](x, amax, M * K, BLOCK=8192)
        to_fp8_kernel[(triton.cdiv(M * K, 4096),)](x, a, amax, scales, M * K, BLOCK=4096)
        bw, wscale = self.weight_operand(w)
        SCALED, STAGES = True, 3
        num_sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
        tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
        a_desc = TensorDescriptor.from_tensor(a, [BM, BK])
        b_desc = TensorDescriptor.from_tensor(bw, [BN, BK])
        gemm_epilogue_kernel[(min(num_sms, tiles),)](
            a_desc, b_desc, b, out, scales, wscale, M, N, a.shape[1], 0.0, 0.0, 0.0, out.stride(0),
            BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8, NUM_SMS=min(num_sms, tiles), SCALED=SCALED,
            num_warps=8, num_stages=STAGES,
        )
        probs = torch.empty_like(out)
        row_softmax_kernel[(M,)](out, probs, N, out.stride(0), BLOCK=1024, num_warps=4)
        return probs
