"""Conv2d, tanh(x - s1) - s2 and a 2x2 average pool as one Triton kernel, as step 0 but the convolution's products on
the tensor cores.

Follows the top advice on step 0: "Do the matrix products on tensor cores (bf16x3)". What changed: each K step splits
its fp32 tiles into bf16 hi = x.to(bf16) and lo = (x - hi).to(bf16) right before the products and sums dot(lo_a, hi_b) +
dot(hi_a, lo_b) + dot(hi_a, hi_b) into the fp32 accumulator (three bf16 MMAs instead of an "ieee" tl.dot on the FMA
pipe); the weight is laid out once per weight version as [K, C_out] (K = 9 taps x C_in, the loop's order), so its
[BLOCK_K, BLOCK_N] tile loads contiguous; the input tile is gathered as [BLOCK_K, BLOCK_M] (a warp's lanes on pixels,
not on channels H x W apart) and transposed in registers; 128x64 tiles, 32 of K a step, 8 warps, 3 stages (218 registers
with Triton 3.9, 249 with 3.6, no spills, wgmma for sm_90a). The four conv pixels of each pooling window, the fused tail
and the pool are as before."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

TILE_M, TILE_N, TILE_K, WARPS, STAGES = 128, 64, 32, 8, 3


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
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    # pooled pixel -> (sample, ph, pw); its window's conv pixels are (POOL ph + dy, POOL pw + dx)
    pw = rm % PW
    ph = (rm // PW) % PH
    b = rm // (PW * PH)
    m_ok = rm < M
    n_ok = rn < C_OUT
    bias = tl.load(b_ptr + rn, mask=n_ok, other=0.0)
    pooled = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for dy in range(POOL):
        for dx in range(POOL):
            # stride 1, no padding: input (oh + kh, ow + kw)
            row = b * C_IN * H * W + (POOL * ph + dy) * W + POOL * pw + dx
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            # K walks the taps, C_IN channels each (BLOCK_K divides C_IN): one loop the compiler can pipeline
            for k0 in range(0, KS * KS * C_IN, BLOCK_K):
                tap = k0 // C_IN
                kh = tap // KS
                kw = tap % KS
                ci = k0 % C_IN + rk
                # gathered as [BLOCK_K, BLOCK_M] so a warp's lanes walk the pixels (stride POOL), not the channels
                # (H x W apart); transposed in the registers
                a = tl.trans(
                    tl.load(x_ptr + row[None, :] + ci[:, None] * H * W + kh * W + kw, mask=m_ok[None, :], other=0.0)
                )
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
        x = x.contiguous()
        B, C_IN, H, W = x.shape
        if C_IN % TILE_K:
            raise ValueError(f"this kernel takes input channels in steps of {TILE_K}; got {C_IN} channels")
        C_OUT, KS = self.conv.out_channels, self.conv.kernel_size[0]
        PH, PW = (H - KS + 1) // self.pool, (W - KS + 1) // self.pool
        out = torch.empty((B, C_OUT, PH, PW), device=x.device, dtype=x.dtype)
        M = B * PH * PW
        grid = (triton.cdiv(M, TILE_M), triton.cdiv(C_OUT, TILE_N))
        conv_tanh_pool_kernel[grid](
            x, self.weight_k_by_cout(), self.conv.bias, out, M, C_IN, C_OUT, H, W, PH, PW,
            self.subtract1_value, self.subtract2_value,
            KS=KS, POOL=self.pool, BLOCK_M=TILE_M, BLOCK_N=TILE_N, BLOCK_K=TILE_K, num_warps=WARPS, num_stages=STAGES,
        )
        return out
