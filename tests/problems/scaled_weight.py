"""A matmul with a weight that the forward scales and transposes every call: work on parameters alone."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features))
        self.gain = nn.Parameter(torch.rand(out_features, 1) + 0.5)

    def forward(self, x):
        w = (self.weight * self.gain).t().contiguous()
        return torch.relu(x @ w)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64, 96]
