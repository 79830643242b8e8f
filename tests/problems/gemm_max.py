"""A Linear then a max over its output features: max is not linear, nothing folds."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.amax(self.linear(x), dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64, 96]
