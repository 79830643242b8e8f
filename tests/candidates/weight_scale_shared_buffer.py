"""relu(x @ W^T + b) on operands scaled by their largest magnitude, both maxima kept in one two-element buffer
(x's in [0], W's in [1]): the launches on W read and write none of x's bytes, so they are work on the weight
alone, though they share a buffer with launches on the input."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def absmax_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(dst_ptr, tl.max(tl.abs(tl.load(src_ptr + r, mask=r < n, other=0.0)), 0))


@triton.jit
def scaled_copy_kernel(src_ptr, dst_ptr, amax_ptr, n, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(dst_ptr + r, tl.load(src_ptr + r, mask=r < n, other=0.0) / tl.load(amax_ptr), mask=r < n)


@triton.jit
def linear_relu_kernel(x_ptr, w_ptr, b_ptr, amax_ptr, out_ptr, M, N, K, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    x = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
    w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
    scale = tl.load(amax_ptr) * tl.load(amax_ptr + 1)
    y = tl.dot(x, w, input_precision="ieee") * scale + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.maximum(y, 0.0), mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        w = self.linear.weight
        M, K = x.shape
        N = w.shape[0]
        amax = torch.empty(2, device=x.device, dtype=x.dtype)
        xs, ws = torch.empty_like(x), torch.empty_like(w)
        absmax_kernel[(1,)](x, amax, x.numel(), BLOCK=4096)
        absmax_kernel[(1,)](w, amax[1:], w.numel(), BLOCK=4096)
        scaled_copy_kernel[(1,)](x, xs, amax, x.numel(), BLOCK=4096)
        scaled_copy_kernel[(1,)](w, ws, amax[1:], w.numel(), BLOCK=4096)
        out = torch.empty((M, N), device=x.device, dtype=x.dtype)
        linear_relu_kernel[(1,)](xs, ws, self.linear.bias, amax, out, M, N, K, BLOCK_M=32, BLOCK_N=64, BLOCK_K=64)
        return out
