"""A plain fp32 matmul, small enough for Triton's CPU interpreter: the agreement corpus's probe of
tl.dot's default input precision (TF32 on NVIDIA GPUs), judged at fp32's 1e-4 unless told."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


M, K, N = 128, 512, 192


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
