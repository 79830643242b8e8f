"""gelu((x @ W^T + b) / 10) as one Triton kernel: an fp32 GEMM on the FMA pipe
(tl.dot with input_precision="ieee", so the result holds at 1e-4), 64x64 tiles, the epilogue fused."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gemm_epilogue_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, C0, C1,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rm[:, None] * stride_xm + (k + rk)[None, :] * stride_xk,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * stride_wn + (k + rk)[:, None] * stride_wk,
                    mask=(rn[None, :] < N) & ((k + rk)[:, None] < K), other=0.0)
        acc = tl.dot(x, w, acc, input_precision="ieee")
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    y = (acc + bias[None, :]) / C0
    y = 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :] * stride_on, y,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


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
        out = torch.empty((M, N), device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        gemm_epilogue_kernel[grid](
            x, w, b, out, M, N, K, self.divisor, 0.0,
            x.stride(0), x.stride(1), w.stride(0), w.stride(1), out.stride(0), out.stride(1),
            BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3,
        )
        return out
