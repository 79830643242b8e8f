"""x * scale + shift on bfloat16 with cuda_bf16.h's __nv_bfloat16 (converted to float for the arithmetic)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_bf16.h>

__global__ void scale_shift_bf16(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y, float scale,
                                 float shift, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = __float2bfloat16(__bfloat162float(x[i]) * scale + shift);
    }
}

torch::Tensor scale_shift_cuda(torch::Tensor x, double scale, double shift) {
    TORCH_CHECK(x.scalar_type() == torch::kBFloat16, "x must be bfloat16, got ", x.scalar_type());
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long n = xc.numel();
    auto* xp = reinterpret_cast<const __nv_bfloat16*>(xc.data_ptr<at::BFloat16>());
    auto* yp = reinterpret_cast<__nv_bfloat16*>(y.data_ptr<at::BFloat16>());
    scale_shift_bf16<<<(unsigned)((n + 255) / 256), 256>>>(xp, yp, (float)scale, (float)shift, n);
    return y;
}
"""

cpp_source = "torch::Tensor scale_shift_cuda(torch::Tensor x, double scale, double shift);"

ext = load_inline(
    name="scale_shift_bf16",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["scale_shift_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()
        self.scale, self.shift = scale, shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.scale_shift_cuda(x, self.scale, self.shift)
