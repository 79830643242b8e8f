"""A Triton kernel that stores far outside its buffer: on a GPU, an illegal-address fault
that poisons the CUDA context of the process that ran it."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scatter_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs * 1_000_000_000, x)  # wrong on purpose


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        scatter_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
