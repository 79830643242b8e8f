"""Elementwise add of two float32 vectors of 4096 elements: the smallest useful problem."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


N = 4096


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
