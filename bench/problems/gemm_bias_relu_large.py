"""GEMM with an epilogue: relu(x @ W^T + b), as nn.Linear followed by ReLU. GPU-sized: kernel time dominates launch overhead."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


batch, in_features, out_features = 2048, 2048, 2048


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, out_features]
