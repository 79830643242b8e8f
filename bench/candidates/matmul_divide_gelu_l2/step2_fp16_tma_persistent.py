"""gelu((x @ W^T + b) / 10): fp16 operands (converted ahead), fed to the tensor cores the way the advice asks: TMA loads (host tensor descriptors) of 128x256x64 tiles (num_warps 8), a 3-stage pipeline, and a persistent grid of one program per SM walking the tiles in grouped order; the epilogue fused as before. TMA feeds the MMA from shared memory as it lands, so the operands are converted to the MMA's type before the GEMM, not inside it.

Follows the top advice on the previous step: "Keep the tensor cores fed (TMA, deeper pipeline, bigger persistent tiles)": The tensor pipe waits on data. Feed it: load tiles with TMA (Triton: tl.make_tensor_descriptor or a host TensorDescriptor; CUDA: cp.async.bulk.tensor through CuTe), pipeline deeper (num_stages 3-5) so loads overlap the MMAs, use larger tiles per CTA (128x256 or 256x128 with num_warps=8, BLOCK_K 64), a persistent grid of one program per SM walking tiles in grouped order (L2 reuse, no tail wave), and warp specialization (tl.range(..., warp_specialize=True)) so producer warps load while consumer warps compute."""

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
    y = (acc + bias[None, :]) / C0
    y = 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], y, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def to_fp16_kernel(src_ptr, dst_ptr, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask, other=0.0).to(tl.float16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)
        self.divisor = divisor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w, b = self.linear.weight, self.linear.bias
        M, K = x.shape
        N = w.shape[0]
        BM, BN, BK = 128, 256, 64
        out = torch.empty((M, N), device=x.device, dtype=torch.float32)
        a = torch.empty((M, K), device=x.device, dtype=torch.float16)
        bw = torch.empty((N, K), device=x.device, dtype=torch.float16)
        to_fp16_kernel[(triton.cdiv(M * K, 4096),)](x, a, M * K, BLOCK=4096)
        to_fp16_kernel[(triton.cdiv(N * K, 4096),)](w, bw, N * K, BLOCK=4096)
        scales, SCALED, STAGES = b, False, 3
        num_sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
        tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
        a_desc = TensorDescriptor.from_tensor(a, [BM, BK])
        b_desc = TensorDescriptor.from_tensor(bw, [BN, BK])
        gemm_epilogue_kernel[(min(num_sms, tiles),)](
            a_desc, b_desc, b, out, scales, M, N, a.shape[1], self.divisor, 0.0, 0.0, out.stride(0),
            BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8, NUM_SMS=min(num_sms, tiles), SCALED=SCALED,
            num_warps=8, num_stages=STAGES,
        )
        return out
