"""Element-wise: y = leaky_relu(x, 0.01) in fp32."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, slope: float):
        super().__init__()
        self.slope = slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, self.slope)


def get_inputs():
    return [torch.randn(2048, 4096)]


def get_init_inputs():
    return [0.01]
