"""A wrong candidate: uses the tanh approximation of GELU, off by up to ~1e-3 from the exact one."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_gelu_tanh_kernel(x_ptr, bias_ptr, out_ptr, n_elements, hidden, scale, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    v = tl.load(x_ptr + offs, mask=mask, other=0.0) + tl.load(bias_ptr + offs % hidden, mask=mask, other=0.0)
    inner = 0.7978845608028654 * (v + 0.044715 * v * v * v)
    t = 2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0
    tl.store(out_ptr + offs, 0.5 * v * (1.0 + t) * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        bias_gelu_tanh_kernel[(triton.cdiv(n, 4096),)](x, self.bias, out, n, x.shape[-1], self.scale, BLOCK=4096)
        return out
