"""A transposed 3-D convolution, a scale, a mean over depth, then a per-channel bias and a softmax over channels
(KernelBench Level 2 #13's shape of work, small): the mean is linear in the convolution's input."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, 3, stride=1, padding=1)
        self.bias = nn.Parameter(torch.randn(1, out_channels, 1, 1, 1))

    def forward(self, x):
        x = self.conv_transpose(x) * 2.0
        x = x.mean(dim=2, keepdim=True)
        return torch.softmax(x + self.bias, dim=1)


def get_inputs():
    return [torch.rand(2, 4, 6, 8, 8)]


def get_init_inputs():
    return [4, 8]
