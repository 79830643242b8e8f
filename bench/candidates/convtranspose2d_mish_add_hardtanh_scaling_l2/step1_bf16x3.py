"""ConvTranspose2d (stride 2), mish, + add, hardtanh(-1, 1) and * scale as one Triton kernel, as step 0 but the
transposed convolution's products on the tensor cores.

Follows the top advice on step 0: "Do the matrix products on tensor cores (bf16x3)". What changed: each K step splits
its fp32 tiles into bf16 hi = x.to(bf16) and lo = (x - hi).to(bf16) right before the products and sums dot(lo_a, hi_b) +
dot(hi_a, lo_b) + dot(hi_a, hi_b) into the fp32 accumulator (three bf16 MMAs instead of an "ieee" tl.dot on the FMA
pipe); the weight is laid out once per weight version as [K, C_out] (K = kh, kw, C_in), so a phase's [BLOCK_K, BLOCK_N]
tile loads contiguous; the input tile is gathered as [BLOCK_K, BLOCK_M] (a warp's lanes on consecutive pixels of a row,
not on channels H x W apart) and transposed in registers; 128x64 tiles, 32 of K a step, 8 warps, 3 stages (102 registers
with Triton 3.9, 122 with 3.6, no spills, wgmma for sm_90a). The stride phases, the fused tail and the stores are as
before."""

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
def convt_mish_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, B, C_IN, C_OUT, H, W, OH, OW, HP, WP, ADD, SCALE,
    KS: tl.constexpr, STRIDE: tl.constexpr, PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    M = B * HP * WP  # pixels of one phase (HP x WP a sample, the last row or column masked where it falls out)
    tiles = tl.cdiv(M, BLOCK_M)
    phase = tl.program_id(0) // tiles
    ph = phase // STRIDE
    pw = phase % STRIDE
    rm = (tl.program_id(0) % tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    jw = rm % WP
    jh = (rm // WP) % HP
    b = rm // (WP * HP)
    oh = jh * STRIDE + ph
    ow = jw * STRIDE + pw
    m_ok = (rm < M) & (oh < OH) & (ow < OW)
    n_ok = rn < C_OUT
    # Output o = STRIDE j + p takes input (o + PAD - k) / STRIDE where that divides: the taps k = r, r + STRIDE, ...
    # with r = (p + PAD) % STRIDE, at input j + q - t for the t-th of them, q = (p + PAD) // STRIDE.
    rh = (ph + PAD) % STRIDE
    rw = (pw + PAD) % STRIDE
    nh = (KS - rh + STRIDE - 1) // STRIDE
    nw = (KS - rw + STRIDE - 1) // STRIDE
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # K walks this phase's taps, C_IN channels each (BLOCK_K divides C_IN)
    for k0 in range(0, nh * nw * C_IN, BLOCK_K):
        t = k0 // C_IN
        kh = rh + (t // nw) * STRIDE
        kw = rw + (t % nw) * STRIDE
        ih = jh + (ph + PAD) // STRIDE - t // nw
        iw = jw + (pw + PAD) // STRIDE - t % nw
        ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        ci = k0 % C_IN + rk
        row = b * C_IN * H * W + ih * W + iw
        # gathered as [BLOCK_K, BLOCK_M] so a warp's lanes walk consecutive input pixels of a row; transposed in
        # the registers
        a = tl.trans(tl.load(x_ptr + row[None, :] + ci[:, None] * H * W, mask=ok[None, :], other=0.0))
        # the [K, C_out] weight: row (kh KS + kw) C_in + ci, contiguous along the output channels
        w_row = (kh * KS + kw) * C_IN + ci
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
        x = x.contiguous()
        B, C_IN, H, W = x.shape
        C_OUT, KS, S, PAD, OPAD = ct.out_channels, ct.kernel_size[0], ct.stride[0], ct.padding[0], ct.output_padding[0]
        OH, OW = (H - 1) * S - 2 * PAD + KS + OPAD, (W - 1) * S - 2 * PAD + KS + OPAD
        HP, WP = triton.cdiv(OH, S), triton.cdiv(OW, S)
        if C_IN % TILE_K:
            raise ValueError(f"this kernel takes input channels in steps of {TILE_K}; got {C_IN} channels")
        out = torch.empty((B, C_OUT, OH, OW), device=x.device, dtype=x.dtype)
        grid = (S * S * triton.cdiv(B * HP * WP, TILE_M), triton.cdiv(C_OUT, TILE_N))
        convt_mish_kernel[grid](
            x, self.weight_k_by_cout(), ct.bias, out, B, C_IN, C_OUT, H, W, OH, OW, HP, WP, self.add_value, self.scale,
            KS=KS, STRIDE=S, PAD=PAD, BLOCK_M=TILE_M, BLOCK_N=TILE_N, BLOCK_K=TILE_K, num_warps=WARPS,
            num_stages=STAGES,
        )
        return out
