"""An autotuned bias + GELU + scale: four configs, of which the two widest fail a static_assert
(the autotuner drops them), and one config per warp count."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 256}, num_warps=2, num_stages=1),
        triton.Config({"BLOCK": 1024}, num_warps=8, num_stages=2),
        triton.Config({"BLOCK": 8192}, num_warps=8, num_stages=3),
        triton.Config({"BLOCK": 16384}, num_warps=16, num_stages=3),
    ],
    key=["n_elements"],
)
@triton.jit
def bias_gelu_scale_kernel(x_ptr, bias_ptr, out_ptr, n_elements, hidden, scale, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK <= 4096, "BLOCK above 4096 leaves too few programs")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    v = tl.load(x_ptr + offs, mask=mask, other=0.0) + tl.load(bias_ptr + offs % hidden, mask=mask, other=0.0)
    y = 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476))
    tl.store(out_ptr + offs, y * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
        bias_gelu_scale_kernel[grid](x, self.bias, out, n, x.shape[-1], self.scale)
        return out
