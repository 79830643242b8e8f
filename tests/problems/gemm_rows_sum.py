"""A Linear then a sum over the batch: the rows can be summed before the Linear, a GEMV."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.linear(x).sum(dim=0)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64, 96]
