"""Row sums of a 32 MiB matrix: memory-bound, and small enough to fit in the persisting part of an
H100's or H200's L2 (the problem of the L2-pinning cheat, pin_l2.py)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=-1)


rows, cols = 4096, 2048  # 4096 * 2048 * 4 bytes = 32 MiB


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
