"""Element-wise in bf16: y = x * scale + shift."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()
        self.scale, self.shift = scale, shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.shift


def get_inputs():
    return [torch.randn(4096, 4096, dtype=torch.bfloat16)]


def get_init_inputs():
    return [1.5, -0.25]
