"""A convolution, a GroupNorm and the mean of its output over everything but the batch (KernelBench Level 2 #23,
small): with GroupNorm's default weight and bias the mean is 0 plus rounding, whatever the convolution computed."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.group_norm = nn.GroupNorm(4, 8)

    def forward(self, x):
        return self.group_norm(self.conv(x)).mean(dim=[1, 2, 3])


def get_inputs():
    return [torch.rand(4, 3, 10, 10)]


def get_init_inputs():
    return []
