"""A naive candidate: correct, but three kernels (bias add, GELU, scale), so x makes three
round trips through memory and the forward pays three launches."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_bias_kernel(x_ptr, bias_ptr, out_ptr, n_elements, hidden, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + tl.load(bias_ptr + offs % hidden, mask=mask), mask=mask)


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    v = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476)), mask=mask)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n_elements, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, block = x.numel(), 1024
        grid = (triton.cdiv(n, block),)
        t1, t2, out = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
        add_bias_kernel[grid](x, self.bias, t1, n, x.shape[-1], BLOCK=block)
        gelu_kernel[grid](t1, t2, n, BLOCK=block)
        scale_kernel[grid](t2, out, n, self.scale, BLOCK=block)
        return out
