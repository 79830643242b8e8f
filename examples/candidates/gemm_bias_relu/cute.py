"""CuTe DSL GEMM + bias + ReLU, the straightforward way: one thread per output element,
a dot product over K in fp32, the epilogue fused before the single store."""

import cutlass
import cutlass.cute as cute
import torch
import torch.nn as nn
from cutlass.cute.runtime import from_dlpack

THREADS = 256


@cute.kernel
def linear_relu_kernel(gX: cute.Tensor, gW: cute.Tensor, gB: cute.Tensor, gO: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    i = bidx * bdim + tidx
    m, k_total = gX.shape
    n = gW.shape[0]
    if i < m * n:
        row = i // n
        col = i % n
        acc = cutlass.Float32(0.0)
        for k in range(k_total):
            acc = acc + gX[row, k] * gW[col, k]
        acc = acc + gB[col]
        gO[row, col] = cute.arch.fmax(acc, cutlass.Float32(0.0))


@cute.jit
def linear_relu(mX: cute.Tensor, mW: cute.Tensor, mB: cute.Tensor, mO: cute.Tensor):
    total = mX.shape[0] * mW.shape[0]
    blocks = (total + THREADS - 1) // THREADS
    linear_relu_kernel(mX, mW, mB, mO).launch(grid=(blocks, 1, 1), block=(THREADS, 1, 1))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self._compiled = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w, b = self.linear.weight.detach().contiguous(), self.linear.bias.detach()
        out = torch.empty((x.shape[0], w.shape[0]), device=x.device, dtype=x.dtype)
        args = (from_dlpack(x), from_dlpack(w), from_dlpack(b), from_dlpack(out))
        key = (tuple(x.shape), tuple(w.shape), str(x.device))
        fn = self._compiled.get(key)
        if fn is None:
            fn = self._compiled[key] = cute.compile(linear_relu, *args)
        fn(*args)
        return out
