"""ConvTranspose3d (stride 1), the mean over depth, a bias, softmax over the channels, tanh and a scale in two Triton
kernels, all in fp32, with the mean taken before the convolution: the mean over depth of a stride-1 transposed
convolution is, per depth tap kd, the (kh, kw) taps applied to the input summed over the depths that tap reaches.

Follows the top advice on step 0: "Reduce before the convolution: the mean over dim(s) 2 of conv_transpose's output
is linear in its input". What changed: a first kernel reads the input once and writes, per depth tap, its sum over
depth less the border slices that tap never reaches ([B, KS, C_in, H, W]); the convolution kernel is then a 2-D
implicit GEMM over those sums (K = 27 taps x C_in, 432 instead of 32 output depths x 3 taps x 144: 1.45e10 FLOPs, not
4.64e11), still tl.dot with input_precision="ieee" on the FMA pipe, with the same fused mean, bias, channel softmax,
tanh and scale on its 64x64 tile, 8 warps."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

TILE_M, TILE_K, WARPS = 64, 16, 8  # the tile's columns are all the output channels (the softmax runs over them)


@triton.jit
def tanh(x):
    # tanh from exp (Triton has no tanh of its own): e = exp(-2|x|) never overflows
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def depth_tap_sums_kernel(
    x_ptr, s_ptr, C_IN, D, HW, OD, KS: tl.constexpr, KS_P2: tl.constexpr, PAD: tl.constexpr, BLOCK: tl.constexpr
):
    # one (sample, channel) and BLOCK of its (h, w) pixels, read once along depth
    bc = tl.program_id(0)
    r = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = r < HW
    # output depth o takes input o + PAD - kd, so depth tap kd reaches inputs lo..hi over the OD outputs
    kd = tl.arange(0, KS_P2)
    lo = tl.maximum(PAD - kd, 0)
    hi = tl.minimum(OD - 1 + PAD - kd, D - 1)
    src = x_ptr + bc.to(tl.int64) * D * HW + r
    acc = tl.zeros((KS_P2, BLOCK), dtype=tl.float32)
    for d in range(D):
        v = tl.load(src + d * HW, mask=ok, other=0.0)
        acc += tl.where(((d >= lo) & (d <= hi))[:, None], v[None, :], 0.0)
    dst = s_ptr + (((bc // C_IN) * KS + kd[:, None]) * C_IN + bc % C_IN).to(tl.int64) * HW + r[None, :]
    tl.store(dst, acc, mask=(kd < KS)[:, None] & ok[None, :])


@triton.jit
def convt_mean_softmax_kernel(
    s_ptr, w_ptr, cb_ptr, bias_ptr, out_ptr, M, C_IN, C_OUT, H, W, OD, OH, OW, SCALE,
    KS: tl.constexpr, PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)
    rm = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    ow = rm % OW
    oh = (rm // OW) % OH
    b = rm // (OW * OH)
    m_ok = rm < M
    n_ok = rn < C_OUT
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # K walks the 27 (kd, kh, kw) taps, C_IN channels each (BLOCK_K divides C_IN); stride 1: output o takes input
    # o + PAD - k, and along depth tap kd's input is its sum over depth (s_ptr: [B, KS, C_IN, H, W])
    for k0 in range(0, KS * KS * KS * C_IN, BLOCK_K):
        tap = k0 // C_IN
        kd = tap // (KS * KS)
        ih = oh + PAD - (tap // KS) % KS
        iw = ow + PAD - tap % KS
        ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        ci = k0 % C_IN + rk
        row = (b * KS + kd) * C_IN * H * W + ih * W + iw
        a = tl.load(s_ptr + row[:, None] + ci[None, :] * H * W, mask=ok[:, None], other=0.0)
        # ConvTranspose3d weight: (C_in, C_out, kd, kh, kw)
        w_off = ci[:, None] * C_OUT * KS * KS * KS + rn[None, :] * KS * KS * KS + tap
        w = tl.load(w_ptr + w_off, mask=n_ok[None, :], other=0.0)
        acc = tl.dot(a, w, acc, input_precision="ieee")
    cb = tl.load(cb_ptr + rn, mask=n_ok, other=0.0)
    bias = tl.load(bias_ptr + rn, mask=n_ok, other=0.0)
    v = acc / OD + cb[None, :] + bias[None, :]
    v = tl.where(n_ok[None, :], v, float("-inf"))
    e = tl.exp(v - tl.max(v, axis=1)[:, None])
    p = e / tl.sum(e, axis=1)[:, None]
    out = out_ptr + (b * C_OUT * OH * OW + oh * OW + ow)[:, None] + rn[None, :] * OH * OW
    tl.store(out, tanh(p) * SCALE, mask=m_ok[:, None] & n_ok[None, :])


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, scaling_factor):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.bias = nn.Parameter(torch.randn(1, out_channels, 1, 1, 1))
        self.scaling_factor = scaling_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ct = self.conv_transpose
        if ct.stride != (1, 1, 1):
            raise ValueError(f"this kernel gathers a stride-1 transposed convolution; got stride {ct.stride}")
        x = x.contiguous()
        B, C_IN, D, H, W = x.shape
        C_OUT, KS, PAD = ct.out_channels, ct.kernel_size[0], ct.padding[0]
        OD, OH, OW = D + KS - 1 - 2 * PAD, H + KS - 1 - 2 * PAD, W + KS - 1 - 2 * PAD
        if C_IN % TILE_K:
            raise ValueError(f"this kernel takes input channels in steps of {TILE_K}; got {C_IN} channels")
        sums = torch.empty((B, KS, C_IN, H, W), device=x.device, dtype=x.dtype)
        depth_tap_sums_kernel[(B * C_IN, triton.cdiv(H * W, 1024))](
            x, sums, C_IN, D, H * W, OD, KS=KS, KS_P2=triton.next_power_of_2(KS), PAD=PAD, BLOCK=1024, num_warps=4,
        )
        out = torch.empty((B, C_OUT, 1, OH, OW), device=x.device, dtype=x.dtype)
        M = B * OH * OW
        convt_mean_softmax_kernel[(triton.cdiv(M, TILE_M),)](
            sums, ct.weight, ct.bias, self.bias, out, M, C_IN, C_OUT, H, W, OD, OH, OW, self.scaling_factor,
            KS=KS, PAD=PAD, BLOCK_M=TILE_M, BLOCK_N=triton.next_power_of_2(C_OUT), BLOCK_K=TILE_K, num_warps=WARPS,
        )
        return out
