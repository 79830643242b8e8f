"""A Linear, a divide, a sum over the output features and a scale: the sum folds into the Linear."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        x = self.linear(x) / 2
        x = torch.sum(x, dim=1, keepdim=True)
        return x * self.scale


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64, 96, 1.5]
