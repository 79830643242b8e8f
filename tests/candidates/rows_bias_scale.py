"""(x + b) * 0.5: one program per row, the whole row in one block."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_scale_kernel(x_ptr, b_ptr, out_ptr, stride, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * stride + cols, mask=mask)
    tl.store(out_ptr + row * stride + cols, (x + tl.load(b_ptr + cols, mask=mask)) * 0.5, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        rows, n = x.shape
        bias_scale_kernel[(rows,)](x, self.bias, out, x.stride(0), n, BLOCK=triton.next_power_of_2(n))
        return out
