"""A Linear, an average pool over its output features, GELU, a scale and a max: the pool folds into a
Linear with as many outputs as it has windows; the max after the GELU does not fold."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, pool_kernel_size, scale):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.avg_pool = nn.AvgPool1d(kernel_size=pool_kernel_size)
        self.scale = scale

    def forward(self, x):
        x = self.matmul(x)
        x = self.avg_pool(x.unsqueeze(1)).squeeze(1)
        x = torch.nn.functional.gelu(x) * self.scale
        return torch.max(x, dim=1).values


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return [32, 64, 8, 2.0]
