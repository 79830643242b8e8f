"""Conv2d, tanh(x - s1) - s2 and a 2x2 average pool as one Triton kernel, as step 1 but the convolution's input tiles
loaded as plain channels-last blocks. Follows the top advice on step 1:
"Feed the convolution's gathers: channels-last input, a K loop by tap, loads in flight"
What changed: the input is laid out channels-last ([B, H, W, C_in]) once per forward (a valid convolution reads no tap
outside it: no padding; rows past M repeat the last pixel: no load mask); K walks tap by tap, channels inside, as one
tl.range over 9 x C_in / 32 steps (a scalar offset per step, the pipeline runs across taps): each A tile is 128 rows of
32 contiguous floats (16-byte cp.async), 4 stages in flight (200 registers with Triton 3.6, 176 with 3.9, no spills,
wgmma). The weight layout, bf16x3 split, pooling windows and fused tail are as in step 1.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

TILE_M, TILE_N, TILE_K, WARPS, STAGES = 128, 64, 32, 8, 4


@triton.jit
def tanh(x):
    # tanh from exp (Triton has no tanh of its own): e = exp(-2|x|) never overflows
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def conv_tanh_pool_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, M, C_IN, C_OUT, H, W, PH, PW, S1, S2,
    KS: tl.constexpr, POOL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    STAGES: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    # pooled pixel -> (sample, ph, pw); rows past M repeat the last pixel, so their loads need no mask (not stored)
    p = tl.minimum(rm, M - 1)
    pw = p % PW
    ph = (p // PW) % PH
    b = p // (PW * PH)
    m_ok = rm < M
    n_ok = rn < C_OUT
    bias = tl.load(b_ptr + rn, mask=n_ok, other=0.0)
    pooled = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for dy in range(POOL):
        for dx in range(POOL):
            # channels-last: conv pixel (POOL ph + dy, POOL pw + dx) starts at this row offset; its tap (kh, kw)
            # reads input (oh + kh, ow + kw), (kh W + kw) C_IN further on (stride 1, no padding)
            pix = ((b * H + POOL * ph + dy) * W + POOL * pw + dx) * C_IN
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            # K tap by tap, channels inside (BLOCK_K divides C_IN), as one loop so the loads stay in flight across
            # taps; a step's tap is a scalar offset: k0 - tap C_IN channels into tap (kh, kw)
            for k0 in tl.range(0, KS * KS * C_IN, BLOCK_K, num_stages=STAGES):
                tap = k0 // C_IN
                shift = ((tap // KS) * W + tap % KS - tap) * C_IN + k0
                # [BLOCK_M, BLOCK_K]: a row of BLOCK_K contiguous channels per pixel, the channel axis fastest
                a = tl.load(x_ptr + pix[:, None] + (shift + rk)[None, :])
                # the [K, C_out] weight: row k0 + rk, contiguous along the output channels
                w = tl.load(w_ptr + (k0 + rk)[:, None] * C_OUT + rn[None, :], mask=n_ok[None, :], other=0.0)
                # bf16x3: hi and lo parts of both tiles, made here so only this step's parts are live
                a_hi = a.to(tl.bfloat16)
                a_lo = (a - a_hi.to(tl.float32)).to(tl.bfloat16)
                w_hi = w.to(tl.bfloat16)
                w_lo = (w - w_hi.to(tl.float32)).to(tl.bfloat16)
                acc = tl.dot(a_lo, w_hi, acc)  # the small terms first
                acc = tl.dot(a_hi, w_lo, acc)
                acc = tl.dot(a_hi, w_hi, acc)
            pooled += tanh(acc + bias[None, :] - S1) - S2
    out = out_ptr + (b * C_OUT * PH * PW + ph * PW + pw)[:, None] + rn[None, :] * PH * PW
    tl.store(out, pooled * (1.0 / (POOL * POOL)), mask=m_ok[:, None] & n_ok[None, :])


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, subtract1_value, subtract2_value, kernel_size_pool):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.subtract1_value = subtract1_value
        self.subtract2_value = subtract2_value
        self.pool = kernel_size_pool

    def weight_k_by_cout(self) -> torch.Tensor:
        """conv.weight (C_out, C_in, kh, kw) as [K, C_out] with K = (kh, kw, C_in), the kernel's order; made once per
        weight version and address, since it changes only when the weight does."""
        w = self.conv.weight
        key = (w._version, w.data_ptr())
        if getattr(self, "_wk_key", None) != key:
            self._wk = w.detach().permute(2, 3, 1, 0).reshape(-1, w.shape[0]).contiguous()
            self._wk_key = key
        return self._wk

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C_IN, H, W = x.shape
        if C_IN % TILE_K:
            raise ValueError(f"this kernel takes input channels in steps of {TILE_K}; got {C_IN} channels")
        # channels-last, in one pass: a pixel's channels contiguous, so a tap's tile is a plain block
        x_cl = x.permute(0, 2, 3, 1).contiguous()
        C_OUT, KS = self.conv.out_channels, self.conv.kernel_size[0]
        PH, PW = (H - KS + 1) // self.pool, (W - KS + 1) // self.pool
        out = torch.empty((B, C_OUT, PH, PW), device=x.device, dtype=x.dtype)
        M = B * PH * PW
        grid = (triton.cdiv(M, TILE_M), triton.cdiv(C_OUT, TILE_N))
        conv_tanh_pool_kernel[grid](
            x_cl, self.weight_k_by_cout(), self.conv.bias, out, M, C_IN, C_OUT, H, W, PH, PW,
            self.subtract1_value, self.subtract2_value,
            KS=KS, POOL=self.pool, BLOCK_M=TILE_M, BLOCK_N=TILE_N, BLOCK_K=TILE_K, STAGES=STAGES, num_warps=WARPS,
        )
        return out
