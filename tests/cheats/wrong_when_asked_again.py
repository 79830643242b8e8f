"""Cheat: right on every input it has not seen, wrong on one it has (a result kept by the input's values and
replayed off by one): right on each correctness trial, wrong on the determinism check's second run."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


def softmax(x, out=None):
    out = torch.empty_like(x) if out is None else out
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = set()

    def forward(self, x):
        out = softmax(x.contiguous())
        key = (tuple(x.shape), float(x.sum()))
        if key in self.seen:
            return out + 1.0
        self.seen.add(key)
        return out
