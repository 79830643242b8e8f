"""A Linear and a ReLU, with a bias parameter the forward never reads (as some KernelBench problems have)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return torch.relu(self.gemm(x))


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64, 96]
