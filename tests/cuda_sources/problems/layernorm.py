"""LayerNorm over the last dimension, without affine parameters."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.hidden, self.eps = hidden, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, (self.hidden,), eps=self.eps)


batch, hidden = 4096, 2048


def get_inputs():
    return [torch.randn(batch, hidden)]


def get_init_inputs():
    return [hidden, 1e-5]
