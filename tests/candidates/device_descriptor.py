"""bias + GELU + scale over 2-D tiles read and written through tensor descriptors built on the
device (tl.make_tensor_descriptor), which needs a global scratch allocator on the GPU."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_gelu_scale_tma_kernel(x_ptr, bias_ptr, out_ptr, M, N, scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    off_m = tl.program_id(0) * BLOCK_M
    off_n = tl.program_id(1) * BLOCK_N
    cols = off_n + tl.arange(0, BLOCK_N)
    v = x_desc.load([off_m, off_n]) + tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :]
    out_desc.store([off_m, off_n], 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476)) * scale)


def alloc(size: int, alignment: int, stream):
    return torch.empty(size, device="cuda", dtype=torch.int8)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:
            triton.set_allocator(alloc)
        x = x.contiguous()
        out = torch.empty_like(x)
        M, N = x.shape
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        bias_gelu_scale_tma_kernel[grid](x, self.bias, out, M, N, self.scale, BLOCK_M=64, BLOCK_N=64)
        return out
