"""(x + b) * 0.5 over the rows of a large batch: at its own shapes more work than a CPU verify of an interpreted
kernel affords with a short timeout, so the CPU lane runs fewer rows (the features, the weights' size, stay)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + self.bias) * 0.5


batch_size = 8192
features = 512


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
