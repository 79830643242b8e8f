"""BatchNorm in training mode: forward normalizes with the batch's statistics and updates the
running mean and variance (module state a candidate must keep too)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(32, 16) * 2 + 1]


def get_init_inputs():
    return [16]
