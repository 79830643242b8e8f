"""A Linear, its square and a sum over its features: the square is not linear, nothing folds."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = self.linear(x)
        return torch.sum(y * y, dim=1)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64, 96]
