"""CuTe DSL row softmax: one warp per row; max and sum reduced with butterfly shuffles."""

import cutlass
import cutlass.cute as cute
import torch
import torch.nn as nn
from cutlass.cute.runtime import from_dlpack

WARP = 32


@cute.jit
def warp_max(v: cutlass.Float32) -> cutlass.Float32:
    v = cute.arch.fmax(v, cute.arch.shuffle_sync_bfly(v, offset=16))
    v = cute.arch.fmax(v, cute.arch.shuffle_sync_bfly(v, offset=8))
    v = cute.arch.fmax(v, cute.arch.shuffle_sync_bfly(v, offset=4))
    v = cute.arch.fmax(v, cute.arch.shuffle_sync_bfly(v, offset=2))
    v = cute.arch.fmax(v, cute.arch.shuffle_sync_bfly(v, offset=1))
    return v


@cute.jit
def warp_sum(v: cutlass.Float32) -> cutlass.Float32:
    v = v + cute.arch.shuffle_sync_bfly(v, offset=16)
    v = v + cute.arch.shuffle_sync_bfly(v, offset=8)
    v = v + cute.arch.shuffle_sync_bfly(v, offset=4)
    v = v + cute.arch.shuffle_sync_bfly(v, offset=2)
    v = v + cute.arch.shuffle_sync_bfly(v, offset=1)
    return v


@cute.kernel
def softmax_kernel(gX: cute.Tensor, gO: cute.Tensor):
    lane, _, _ = cute.arch.thread_idx()
    row, _, _ = cute.arch.block_idx()
    n = gX.shape[1]
    mx = cutlass.Float32(-3.4028234663852886e38)
    for c in range(lane, n, WARP):
        mx = cute.arch.fmax(mx, gX[row, c])
    mx = warp_max(mx)
    total = cutlass.Float32(0.0)
    for c in range(lane, n, WARP):
        total = total + cute.math.exp(gX[row, c] - mx)
    total = warp_sum(total)
    inv = cutlass.Float32(1.0) / total
    for c in range(lane, n, WARP):
        gO[row, c] = cute.math.exp(gX[row, c] - mx) * inv


@cute.jit
def row_softmax(mX: cute.Tensor, mO: cute.Tensor):
    softmax_kernel(mX, mO).launch(grid=(mX.shape[0], 1, 1), block=(WARP, 1, 1))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._compiled = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        args = (from_dlpack(x), from_dlpack(out))
        key = (tuple(x.shape), str(x.device))
        fn = self._compiled.get(key)
        if fn is None:
            fn = self._compiled[key] = cute.compile(row_softmax, *args)
        fn(*args)
        return out
