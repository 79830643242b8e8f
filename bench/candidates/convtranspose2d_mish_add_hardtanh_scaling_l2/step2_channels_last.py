"""ConvTranspose2d (stride 2), mish, + add, hardtanh(-1, 1) and * scale as one Triton kernel, as step 1 but the
transposed convolution's input tiles loaded as plain channels-last blocks. Follows the top advice on step 1:
"Feed the convolution's gathers: channels-last input, a K loop by tap, loads in flight"
What changed: the input is laid out channels-last and zero-padded ([B, H + 1, W + 1, C_in] here) once per forward, so
no tap of a phase reads outside it and the K loop has no mask (rows past M repeat the last pixel); the split by output
parity (one program axis, each phase a dense convolution over its 1, 2 or 4 taps) was already step 1's. K walks the
phase's taps, channels inside, as one tl.range (a scalar offset per step): each A tile is 128 rows of 32 contiguous
floats (16-byte cp.async), 4 stages in flight (99 registers with Triton 3.6, 203 with 3.9, no spills, wgmma). The
weight layout, bf16x3 split, fused tail and stores are as in step 1.
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
def convt_mish_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, B, C_IN, C_OUT, HX, WX, LO_H, LO_W, OH, OW, HP, WP, ADD, SCALE,
    KS: tl.constexpr, STRIDE: tl.constexpr, PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr,
):
    M = B * HP * WP  # pixels of one phase (HP x WP a sample, the last row or column masked where it falls out)
    tiles = tl.cdiv(M, BLOCK_M)
    phase = tl.program_id(0) // tiles
    ph = phase // STRIDE
    pw = phase % STRIDE
    rm = (tl.program_id(0) % tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    # rows past M repeat the last pixel, so their loads need no mask (they are not stored)
    p = tl.minimum(rm, M - 1)
    jw = p % WP
    jh = (p // WP) % HP
    b = p // (WP * HP)
    oh = jh * STRIDE + ph
    ow = jw * STRIDE + pw
    m_ok = (rm < M) & (oh < OH) & (ow < OW)
    n_ok = rn < C_OUT
    # Output o = STRIDE j + p takes input (o + PAD - k) / STRIDE where that divides: the taps k = r, r + STRIDE, ...
    # with r = (p + PAD) % STRIDE, at input j + q - t for the t-th of them, q = (p + PAD) // STRIDE.
    rh = (ph + PAD) % STRIDE
    rw = (pw + PAD) % STRIDE
    qh = (ph + PAD) // STRIDE
    qw = (pw + PAD) // STRIDE
    nh = (KS - rh + STRIDE - 1) // STRIDE
    nw = (KS - rw + STRIDE - 1) // STRIDE
    # channels-last input padded by LO_H, LO_W in front: pixel (jh, jw) of sample b starts at this row offset, and
    # its input j + q - t for tap t lies inside the padded image (zeros where the convolution has no input)
    pix = ((b * HX + jh + LO_H) * WX + jw + LO_W) * C_IN
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # K walks this phase's taps, channels inside (BLOCK_K divides C_IN), as one loop so the loads stay in flight
    # across taps; a step's tap t = (th, tw) is a scalar offset: k0 - t C_IN channels into the tap
    for k0 in tl.range(0, nh * nw * C_IN, BLOCK_K, num_stages=STAGES):
        t = k0 // C_IN
        th = t // nw
        tw = t % nw
        shift = ((qh - th) * WX + qw - tw - t) * C_IN + k0
        # [BLOCK_M, BLOCK_K]: a row of BLOCK_K contiguous channels per pixel, the channel axis fastest
        a = tl.load(x_ptr + pix[:, None] + (shift + rk)[None, :])
        # the [K, C_out] weight: row (kh KS + kw) C_in + ci, contiguous along the output channels
        w_row = ((rh + th * STRIDE) * KS + rw + tw * STRIDE - t) * C_IN + k0 + rk
        w = tl.load(w_ptr + w_row[:, None] * C_OUT + rn[None, :], mask=n_ok[None, :], other=0.0)
        # bf16x3: hi and lo parts of both tiles, made here so only this step's parts are live
        a_hi = a.to(tl.bfloat16)
        a_lo = (a - a_hi.to(tl.float32)).to(tl.bfloat16)
        w_hi = w.to(tl.bfloat16)
        w_lo = (w - w_hi.to(tl.float32)).to(tl.bfloat16)
        acc = tl.dot(a_lo, w_hi, acc)  # the small terms first
        acc = tl.dot(a_hi, w_lo, acc)
        acc = tl.dot(a_hi, w_hi, acc)
    v = acc + tl.load(b_ptr + rn, mask=n_ok, other=0.0)[None, :]
    softplus = tl.maximum(v, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(v)))
    v = v * tanh(softplus) + ADD
    v = tl.minimum(tl.maximum(v, -1.0), 1.0) * SCALE
    out = out_ptr + (b * C_OUT * OH * OW + oh * OW + ow)[:, None] + rn[None, :] * OH * OW
    tl.store(out, v, mask=m_ok[:, None] & n_ok[None, :])


def phase_padding(n: int, n_phase: int, ks: int, stride: int, pad: int) -> tuple[int, int]:
    """Zeros needed before and after an input axis of n so that every phase's taps read inside it: output
    o = stride j + p (j < n_phase) reads input j + q - t for its taps t < ceil((ks - r) / stride), r = (p + pad) % stride,
    q = (p + pad) // stride."""
    lowest, highest = 0, n - 1
    for p in range(stride):
        r, q = (p + pad) % stride, (p + pad) // stride
        lowest = min(lowest, q - (ks - r + stride - 1) // stride + 1)
        highest = max(highest, n_phase - 1 + q)
    return -lowest, highest - (n - 1)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, add_value, scale):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(
            in_channels, out_channels, kernel_size, stride, padding, output_padding
        )
        self.add_value = add_value
        self.scale = scale

    def weight_k_by_cout(self) -> torch.Tensor:
        """conv_transpose.weight (C_in, C_out, kh, kw) as [K, C_out] with K = (kh, kw, C_in); made once per weight
        version and address, since it changes only when the weight does."""
        w = self.conv_transpose.weight
        key = (w._version, w.data_ptr())
        if getattr(self, "_wk_key", None) != key:
            self._wk = w.detach().permute(2, 3, 0, 1).reshape(-1, w.shape[1]).contiguous()
            self._wk_key = key
        return self._wk

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ct = self.conv_transpose
        B, C_IN, H, W = x.shape
        C_OUT, KS, S, PAD, OPAD = ct.out_channels, ct.kernel_size[0], ct.stride[0], ct.padding[0], ct.output_padding[0]
        OH, OW = (H - 1) * S - 2 * PAD + KS + OPAD, (W - 1) * S - 2 * PAD + KS + OPAD
        HP, WP = triton.cdiv(OH, S), triton.cdiv(OW, S)
        if C_IN % TILE_K:
            raise ValueError(f"this kernel takes input channels in steps of {TILE_K}; got {C_IN} channels")
        (lo_h, hi_h), (lo_w, hi_w) = phase_padding(H, HP, KS, S, PAD), phase_padding(W, WP, KS, S, PAD)
        # channels-last and zero-padded, in one pass over x: only the border is zeroed besides the copy
        xp = x.new_empty((B, lo_h + H + hi_h, lo_w + W + hi_w, C_IN))
        for border in (xp[:, :lo_h], xp[:, lo_h + H :], xp[:, :, :lo_w], xp[:, :, lo_w + W :]):
            border.zero_()
        xp[:, lo_h : lo_h + H, lo_w : lo_w + W].copy_(x.permute(0, 2, 3, 1))
        out = torch.empty((B, C_OUT, OH, OW), device=x.device, dtype=x.dtype)
        grid = (S * S * triton.cdiv(B * HP * WP, TILE_M), triton.cdiv(C_OUT, TILE_N))
        convt_mish_kernel[grid](
            xp, self.weight_k_by_cout(), ct.bias, out, B, C_IN, C_OUT, xp.shape[1], xp.shape[2], lo_h, lo_w,
            OH, OW, HP, WP, self.add_value, self.scale,
            KS=KS, STRIDE=S, PAD=PAD, BLOCK_M=TILE_M, BLOCK_N=TILE_N, BLOCK_K=TILE_K, STAGES=STAGES, num_warps=WARPS,
        )
        return out
