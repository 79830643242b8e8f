"""A crashing candidate: the process dies in the middle of forward (as a CUDA fault or a
segfault would take it down), so the harness must contain it and keep serving."""

import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, hidden: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        os.abort()  # SIGABRT: no exception, no cleanup, the process is gone
