"""A convolution whose problem leaves reduced-precision math on for fp32 convolutions, as torch leaves cuDNN's
TF32 on by default on a GPU. On the CPU the switch is oneDNN's; oneDNN honours it only on CPUs with bf16 units, so
the forward rounds the operands to bf16 itself when the switch says bf16, as such a CPU would."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.backends.mkldnn.conv.fp32_precision = "bf16"


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        if torch.backends.mkldnn.conv.fp32_precision == "bf16":
            w, b = self.conv.weight, self.conv.bias
            return F.conv2d(x.bfloat16(), w.bfloat16(), b.bfloat16()).float()
        return self.conv(x)


def get_inputs():
    return [torch.randn(2, 4, 8, 8)]


def get_init_inputs():
    return [4, 8, 3]
