"""A naive candidate: correct, but three passes over each row in three kernels (row max,
sum of exponentials, normalize), with the row read in chunks of 256 by one warp."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_max_kernel(x_ptr, max_ptr, n_cols, stride, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    for start in range(0, n_cols, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
        m = tl.maximum(m, tl.max(x, axis=0))
    tl.store(max_ptr + row, m)


@triton.jit
def row_sum_exp_kernel(x_ptr, max_ptr, sum_ptr, n_cols, stride, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    m = tl.load(max_ptr + row)
    s = 0.0
    for start in range(0, n_cols, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
        s += tl.sum(tl.exp(x - m), axis=0)
    tl.store(sum_ptr + row, s)


@triton.jit
def normalize_kernel(x_ptr, max_ptr, sum_ptr, out_ptr, n_cols, stride, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    m = tl.load(max_ptr + row)
    s = tl.load(sum_ptr + row)
    for start in range(0, n_cols, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + row * stride + cols, tl.exp(x - m) / s, mask=cols < n_cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        row_max = torch.empty(rows, device=x.device, dtype=x.dtype)
        row_sum = torch.empty(rows, device=x.device, dtype=x.dtype)
        out = torch.empty_like(x)
        row_max_kernel[(rows,)](x, row_max, cols, x.stride(0), CHUNK=256, num_warps=1)
        row_sum_exp_kernel[(rows,)](x, row_max, row_sum, cols, x.stride(0), CHUNK=256, num_warps=1)
        normalize_kernel[(rows,)](x, row_max, row_sum, out, cols, x.stride(0), CHUNK=256, num_warps=1)
        return out
