"""The error is inside a @triton.jit helper (line 10), called from the kernel (line 17)."""

import triton
import triton.language as tl


@triton.jit
def bad_helper(x):
    # wrong on purpose: the name is misspelled
    return x * tl.sigmoidd(x)


@triton.jit
def silu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr = 1024):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, bad_helper(x), mask=offs < n)
