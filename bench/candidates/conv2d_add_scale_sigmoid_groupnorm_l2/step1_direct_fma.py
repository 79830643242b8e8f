"""Conv2d, a per-channel bias and scale, sigmoid and GroupNorm in two Triton kernels, all in fp32. A direct convolution
on the FMA units takes BLOCK_P consecutive output pixels of one sample and every output channel: per tap it loads the
pixels' inputs straight from the NCHW input and the tap's weights of every channel, and adds their outer product to a
[channels, pixels] accumulator; its epilogue adds the conv bias and the extra bias, multiplies by the scale and writes
the sigmoid of that. One program per (sample, group) then reads the group three times (mean, variance, normalize with
gamma and beta) and writes the output.

Follows the top advice on step 0: "Compute the small convolution directly on the FMA units". What changed: the
implicit GEMM on tl.dot became a direct convolution in exact fp32 on the FMA units (weight laid out [taps, channels]
once per weight version, a loop over (channel, kh) with kw unrolled, 128 pixels a program of one warp)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_P, WARPS = 128, 1
GN_BLOCK, GN_WARPS = 1024, 4


@triton.jit
def conv2d_fma_sigmoid_kernel(
    x_ptr,
    w_ptr,
    cb_ptr,
    bias_ptr,
    scale_ptr,
    y_ptr,
    C_IN,
    C_OUT,
    H,
    W,
    OW,
    SPATIAL,
    KS: tl.constexpr,
    CHANNELS: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    b = tl.program_id(1)
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    p_ok = p < SPATIAL
    # output pixel (oh, ow) of sample b; stride 1, no padding: tap (c, kh, kw) reads input (c, oh + kh, ow + kw)
    oh = p // OW
    ow = p % OW
    src = x_ptr + b.to(tl.int64) * C_IN * H * W + oh * W + ow
    ch = tl.arange(0, CHANNELS)
    acc = tl.zeros((CHANNELS, BLOCK_P), dtype=tl.float32)
    # a loop over (c, kh) with its KS kw taps unrolled: unrolling every tap overflows the instruction cache
    for ckh in range(C_IN * KS):
        c = ckh // KS
        kh = ckh % KS
        row = src + (c * H + kh) * W
        for kw in tl.static_range(KS):
            xv = tl.load(row + kw, mask=p_ok, other=0.0)
            # the tap's weights of every channel, laid out [taps (c, kh, kw), CHANNELS] (zeros past C_OUT)
            w = tl.load(w_ptr + (ckh * KS + kw) * CHANNELS + ch)
            acc += w[:, None] * xv[None, :]
    ch_ok = ch < C_OUT
    cb = tl.load(cb_ptr + ch, mask=ch_ok, other=0.0)
    bias = tl.load(bias_ptr + ch, mask=ch_ok, other=0.0)
    scale = tl.load(scale_ptr + ch, mask=ch_ok, other=0.0)
    v = (acc + (cb + bias)[:, None]) * scale[:, None]
    v = 1.0 / (1.0 + tl.exp(-v))
    out = y_ptr + b.to(tl.int64) * C_OUT * SPATIAL + ch[:, None] * SPATIAL + p[None, :]
    tl.store(out, v, mask=ch_ok[:, None] & p_ok[None, :])


@triton.jit
def groupnorm_kernel(y_ptr, gamma_ptr, beta_ptr, out_ptr, C, GROUPS, SPATIAL, eps, BLOCK: tl.constexpr):
    # one (sample, group): its channels are contiguous, one stretch of cpg x SPATIAL values
    pid = tl.program_id(0)
    g = pid % GROUPS
    cpg = C // GROUPS
    n = cpg * SPATIAL
    offset = pid.to(tl.int64) * n
    src = y_ptr + offset
    dst = out_ptr + offset
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, n, BLOCK):
        r = i + tl.arange(0, BLOCK)
        s += tl.load(src + r, mask=r < n, other=0.0)
    mean = tl.sum(s) / n
    ss = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, n, BLOCK):
        r = i + tl.arange(0, BLOCK)
        d = tl.where(r < n, tl.load(src + r, mask=r < n, other=0.0) - mean, 0.0)
        ss += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(ss) / n + eps)
    for i in range(0, n, BLOCK):
        r = i + tl.arange(0, BLOCK)
        r_ok = r < n
        c = g * cpg + r // SPATIAL
        v = tl.load(src + r, mask=r_ok, other=0.0)
        gamma = tl.load(gamma_ptr + c, mask=r_ok, other=0.0)
        beta = tl.load(beta_ptr + c, mask=r_ok, other=0.0)
        tl.store(dst + r, (v - mean) * rstd * gamma + beta, mask=r_ok)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups, bias_shape, scale_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def weight_taps(self) -> torch.Tensor:
        """conv.weight (C_out, C_in, kh, kw) as [taps (c, kh, kw), next power of two of C_out]: a tap's weights of
        every output channel contiguous, zeros past C_out; made once per weight version and address."""
        w = self.conv.weight
        key = (w._version, w.data_ptr())
        if getattr(self, "_wk_key", None) != key:
            c_out = w.shape[0]
            taps = torch.zeros((w[0].numel(), triton.next_power_of_2(c_out)), device=w.device, dtype=torch.float32)
            taps[:, :c_out] = w.detach().reshape(c_out, -1).t()
            self._wk, self._wk_key = taps, key
        return self._wk

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv, gn = self.conv, self.group_norm
        x = x.contiguous()
        B, C_IN, H, W = x.shape
        C_OUT, KS = conv.out_channels, conv.kernel_size[0]
        if self.bias.numel() != C_OUT or self.scale.numel() != C_OUT:
            raise ValueError(f"this kernel takes a bias and a scale of one value per channel ({C_OUT})")
        OH, OW = H - KS + 1, W - KS + 1
        spatial = OH * OW
        channels = triton.next_power_of_2(C_OUT)
        y = torch.empty((B, C_OUT, OH, OW), device=x.device, dtype=x.dtype)
        conv2d_fma_sigmoid_kernel[(triton.cdiv(spatial, BLOCK_P), B)](
            x,
            self.weight_taps(),
            conv.bias,
            self.bias,
            self.scale,
            y,
            C_IN,
            C_OUT,
            H,
            W,
            OW,
            spatial,
            KS=KS,
            CHANNELS=channels,
            BLOCK_P=BLOCK_P,
            num_warps=WARPS,
        )
        out = torch.empty_like(y)
        G = gn.num_groups
        groupnorm_kernel[(B * G,)](
            y, gn.weight, gn.bias, out, C_OUT, G, spatial, gn.eps, BLOCK=GN_BLOCK, num_warps=GN_WARPS
        )
        return out
