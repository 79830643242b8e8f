"""CuTe DSL: one thread per element for bias add, exact (erf) GELU and scale.

The launcher is compiled once per shape with cute.compile and the compiled function is
called from forward (torch tensors cross over through DLPack)."""

import cutlass
import cutlass.cute as cute
import torch
import torch.nn as nn
from cutlass.cute.runtime import from_dlpack

THREADS = 256


@cute.kernel
def bias_gelu_scale_kernel(gX: cute.Tensor, gB: cute.Tensor, gO: cute.Tensor, scale: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    i = bidx * bdim + tidx
    m, n = gX.shape
    if i < m * n:
        row = i // n
        col = i % n
        v = gX[row, col] + gBias[col]
        gO[row, col] = cutlass.Float32(0.5) * v * (cutlass.Float32(1.0) + cute.math.erf(v * cutlass.Float32(0.7071067811865476))) * scale


@cute.jit
def bias_gelu_scale(mX: cute.Tensor, mB: cute.Tensor, mO: cute.Tensor, scale: cutlass.Float32):
    m, n = mX.shape
    blocks = (m * n + THREADS - 1) // THREADS
    bias_gelu_scale_kernel(mX, mB, mO, scale).launch(grid=(blocks, 1, 1), block=(THREADS, 1, 1))


class ModelNew(nn.Module):
    def __init__(self, hidden: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden))
        self.scale = scale
        self._compiled = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        args = (from_dlpack(x), from_dlpack(self.bias.detach()), from_dlpack(out), cutlass.Float32(self.scale))
        key = (tuple(x.shape), str(x.device))
        fn = self._compiled.get(key)
        if fn is None:
            fn = self._compiled[key] = cute.compile(bias_gelu_scale, *args)
        fn(*args)
        return out
