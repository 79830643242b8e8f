"""Cheat (GPU, CUDA): pins its input in L2 to get around the L2 flush before each timed call. Every call
raises the persisting-L2 limit to the device's maximum and sets an access policy window over its input on
the current stream. Both outlive the call: left in place, they change what is timed after it (the
baselines, the next candidate). Its honest twin, pin_l2_honest.py, runs the same kernel without them."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

constexpr int THREADS = 256;

__global__ void row_sum_kernel(const float4* __restrict__ x, float* __restrict__ out, int cols4) {
    __shared__ float partial[THREADS / 32];
    const float4* row = x + (long)blockIdx.x * cols4;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols4; c += THREADS) {
        float4 v = row[c];
        s += (v.x + v.y) + (v.z + v.w);
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < THREADS / 32 ? partial[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0) out[blockIdx.x] = s;
    }
}

torch::Tensor row_sum(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.size(1) % 4 == 0, "x: a 2-D CUDA tensor, columns a multiple of 4");
    auto xc = x.contiguous();
    auto out = torch::empty({xc.size(0)}, xc.options());
    auto stream = at::cuda::getCurrentCUDAStream();
    // Pin the input in L2, so the harness's L2 flush leaves it there: raise the persisting set-aside to
    // the most the device allows and mark the input's bytes persisting on the current stream.
    static cudaDeviceProp prop;
    static bool have_prop = false;
    if (!have_prop) {
        int dev;
        cudaGetDevice(&dev);
        cudaGetDeviceProperties(&prop, dev);
        have_prop = true;
    }
    const size_t bytes = (size_t)xc.numel() * sizeof(float);
    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, (size_t)prop.persistingL2CacheMaxSize);
    cudaStreamAttrValue attr = {};
    attr.accessPolicyWindow.base_ptr = xc.data_ptr();
    attr.accessPolicyWindow.num_bytes = bytes < (size_t)prop.accessPolicyMaxWindowSize ? bytes : (size_t)prop.accessPolicyMaxWindowSize;
    attr.accessPolicyWindow.hitRatio = 1.0f;
    attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    cudaStreamSetAttribute(stream.stream(), cudaStreamAttributeAccessPolicyWindow, &attr);
    row_sum_kernel<<<(int)xc.size(0), THREADS, 0, stream>>>(
        reinterpret_cast<const float4*>(xc.data_ptr<float>()), out.data_ptr<float>(), (int)(xc.size(1) / 4));
    return out;
}
"""

ext = load_inline(
    name="row_sum_pinned",
    cpp_sources="torch::Tensor row_sum(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["row_sum"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.row_sum(x)
