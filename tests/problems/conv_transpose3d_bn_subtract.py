"""KernelBench Level 2 #15 (ConvTranspose3d + training-mode BatchNorm3d + subtracting the spatial mean) at smaller
shapes: the reference's convolution runs through cuDNN, in TF32 under torch's defaults, and the normalization
magnifies that rounding past fp32's 1e-4."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias=True):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias
        )
        self.batch_norm = nn.BatchNorm3d(out_channels)

    def forward(self, x):
        x = self.conv_transpose(x)
        x = self.batch_norm(x)
        x = x - torch.mean(x, dim=(2, 3, 4), keepdim=True)
        return x


batch_size = 4
in_channels = 16
out_channels = 32
depth, height, width = 8, 16, 16
kernel_size = 3
stride = 2
padding = 1


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding]
