"""A Linear then a sum over its features behind Python control flow on a shape, which symbolic_trace
cannot follow (torch.export can)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = self.linear(x)
        if y.shape[0] > 1:
            return y.mean(dim=-1, keepdim=True)
        return y


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64, 96]
