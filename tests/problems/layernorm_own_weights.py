"""LayerNorm over the last dimension whose Model draws its own weight and bias with torch.randn."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden))
        self.bias = nn.Parameter(torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, x.shape[-1:], self.weight, self.bias)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return [256]
