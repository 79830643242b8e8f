"""One CUDA kernel for bias add, exact (erf) GELU and scale, built with load_inline (KernelBench form)."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void bias_gelu_scale_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                       float* __restrict__ out, long n, int hidden, float scale) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i] + bias[i % hidden];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)) * scale;
    }
}

torch::Tensor bias_gelu_scale_cuda(torch::Tensor x, torch::Tensor bias, double scale) {
    TORCH_CHECK(x.is_cuda() && bias.is_cuda(), "inputs must be CUDA tensors");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    long n = xc.numel();
    int hidden = (int)bias.numel();
    const int threads = 256;
    const int blocks = (int)((n + threads - 1) / threads);
    bias_gelu_scale_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(),
                                                n, hidden, (float)scale);
    return out;
}
"""

cpp_source = "torch::Tensor bias_gelu_scale_cuda(torch::Tensor x, torch::Tensor bias, double scale);"

bias_gelu_scale = load_inline(
    name="bias_gelu_scale",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["bias_gelu_scale_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden))
        self.scale = scale
        self.ext = bias_gelu_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.bias_gelu_scale_cuda(x, self.bias, self.scale)
