"""Leaky ReLU with a template of type and width (four elements a thread where they fit), dispatched with
AT_DISPATCH_FLOATING_TYPES under a CUDAGuard; C10_CUDA_CHECK after the launch."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

template <typename scalar_t, int VEC>
__global__ void __launch_bounds__(256) leaky_relu_vec_kernel(const scalar_t* x, scalar_t* y, scalar_t slope, int64_t n) {
    int64_t base = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        int64_t i = base + k;
        if (i < n) {
            scalar_t v = x[i];
            y[i] = v > scalar_t(0) ? v : v * slope;
        }
    }
}

template <typename scalar_t>
static void launch(const torch::Tensor& x, torch::Tensor& y, double slope, cudaStream_t stream) {
    const int64_t n = x.numel();
    const int threads = 256;
    if (n % 4 == 0) {
        const int blocks = (int)((n / 4 + threads - 1) / threads);
        leaky_relu_vec_kernel<scalar_t, 4><<<blocks, threads, 0, stream>>>(
            x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), static_cast<scalar_t>(slope), n);
    } else {
        const int blocks = (int)((n + threads - 1) / threads);
        leaky_relu_vec_kernel<scalar_t, 1><<<blocks, threads, 0, stream>>>(
            x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), static_cast<scalar_t>(slope), n);
    }
}

torch::Tensor leaky_relu_cuda(torch::Tensor x, double slope) {
    TORCH_CHECK(x.device().is_cuda(), "x must be a CUDA tensor");
    c10::cuda::CUDAGuard device_guard(x.device());
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "leaky_relu_vec", [&] { launch<scalar_t>(xc, y, slope, stream); });
    C10_CUDA_CHECK(cudaGetLastError());
    return y;
}
"""

cpp_source = "torch::Tensor leaky_relu_cuda(torch::Tensor x, double slope);"

ext = load_inline(
    name="leaky_relu_vectorized",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["leaky_relu_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, slope: float):
        super().__init__()
        self.slope = slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.leaky_relu_cuda(x, self.slope)
