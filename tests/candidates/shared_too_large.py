"""A GEMM whose tiles and stages ask for more shared memory than a block may have on sm_90a."""

import triton
import triton.language as tl


@triton.jit
def big_tiles_kernel(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr = 256, BN: tl.constexpr = 256, BK: tl.constexpr = 64):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)
