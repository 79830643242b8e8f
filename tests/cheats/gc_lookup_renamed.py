"""Cheat: the garbage-collector lookup of gc_lookup.py with its names hidden from a static check
(the module and function names are built at run time). Only the run-time defence can catch it: the
candidate runs before the reference in each trial, so no output of this trial exists to be found."""

import importlib
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
    def forward(self, x):
        lookup = getattr(importlib.import_module("g" + "c"), "get_" + "objects")
        for obj in lookup():
            if isinstance(obj, torch.Tensor) and obj.shape == x.shape and obj is not x and float(obj.sum()) > 0:
                if torch.allclose(obj.sum(-1), torch.ones(x.shape[0], device=x.device)):
                    return obj.clone()
        return torch.zeros_like(x)
