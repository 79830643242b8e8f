"""A cubic with given coefficients, then a fixed 5-tap smoothing along each row."""

import torch
import torch.nn as nn

TAPS = [0.0625, 0.25, 0.375, 0.25, 0.0625]


class Model(nn.Module):
    def __init__(self, c0: float, c1: float, c2: float, c3: float):
        super().__init__()
        self.coeffs = (c0, c1, c2, c3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c0, c1, c2, c3 = self.coeffs
        y = c0 + x * (c1 + x * (c2 + x * c3))
        padded = torch.nn.functional.pad(y, (2, 2))  # zeros past each end of a row
        width = x.shape[1]
        return sum(t * padded[:, k : k + width] for k, t in enumerate(TAPS))


def get_inputs():
    return [torch.rand(1024, 4096) * 2 - 1]


def get_init_inputs():
    return [0.5, -1.0, 0.25, 2.0]
