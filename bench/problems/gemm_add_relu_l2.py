"""KernelBench Level 2 shape of Gemm_Add_ReLU: relu(x @ W^T + bias) with a bias-free Linear and a separate
bias parameter, 1024 x 8192 x 8192 in fp32 (judged at 1e-4). The GEMM dominates: 137 GFLOP per forward."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias_shape: tuple):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.gemm(x) + self.bias)


batch_size, in_features, out_features = 1024, 8192, 8192


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, (out_features,)]
