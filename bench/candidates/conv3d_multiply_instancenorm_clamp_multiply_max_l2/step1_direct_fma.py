"""Conv3d, multiplier, InstanceNorm, clamp, multiplier and the max over channels in three Triton kernels, all in fp32:
a direct convolution on the FMA units (a program takes BLOCK_P consecutive output voxels of one sample and every
output channel, reads the NCDHW input as it lies, one load a tap times the tap's weights of every channel) writes its
output with the bias added and times the multiplier; one program per (sample, channel) then computes that channel's
mean and biased variance over its voxels in two passes; a last kernel normalizes each voxel's channels, clamps them,
multiplies by the multiplier again and writes their maximum.

Follows the top advice on step 0: "Compute the small convolution directly on the FMA units". What changed: the
implicit GEMM through tl.dot becomes a direct fp32 convolution, acc[channels, 128 voxels] (one warp) grown a tap at
a time from weights laid out [taps, channels] once per weight version; the loop runs over (c, kd, kh) with kw
unrolled. Its epilogue (bias, multiplier, store) and the other two kernels are step 0's."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_P, WARPS = 128, 1
MAX_BLOCK_S = 64
STATS_BLOCK = 1024


@triton.jit
def conv3d_mul_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    mult_ptr,
    y_ptr,
    C_OUT,
    D,
    H,
    W,
    OH,
    OW,
    SPATIAL,
    C_IN: tl.constexpr,
    KS: tl.constexpr,
    CHANNELS: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    b = tl.program_id(1)
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    p_ok = p < SPATIAL
    # output voxel -> (od, oh, ow); stride 1, no padding: input (od + kd, oh + kh, ow + kw)
    od = p // (OH * OW)
    oh = (p // OW) % OH
    ow = p % OW
    src = x_ptr + b.to(tl.int64) * C_IN * D * H * W + (od * H + oh) * W + ow
    co = tl.arange(0, CHANNELS)
    c_ok = co < C_OUT
    acc = tl.zeros((CHANNELS, BLOCK_P), dtype=tl.float32)
    # a loop over (c, kd, kh) with its KS kw taps unrolled: unrolling every tap overflows the instruction cache
    for ckh in range(C_IN * KS * KS):
        c = ckh // (KS * KS)
        kd = (ckh // KS) % KS
        kh = ckh % KS
        row = src + ((c * D + kd) * H + kh) * W
        for kw in tl.static_range(KS):
            xv = tl.load(row + kw, mask=p_ok, other=0.0)
            # the tap's weights, laid out [tap, CHANNELS] (channels past C_OUT hold zeros)
            w = tl.load(w_ptr + (ckh * KS + kw) * CHANNELS + co)
            acc += w[:, None] * xv[None, :]
    acc += tl.load(b_ptr + co, mask=c_ok, other=0.0)[:, None]
    acc *= tl.load(mult_ptr + co, mask=c_ok, other=0.0)[:, None]
    ok = c_ok[:, None] & p_ok[None, :]
    tl.store(y_ptr + (b.to(tl.int64) * C_OUT + co[:, None]) * SPATIAL + p[None, :], acc, mask=ok)


@triton.jit
def instance_stats_kernel(y_ptr, mean_ptr, var_ptr, SPATIAL, BLOCK: tl.constexpr):
    pid = tl.program_id(0)  # one (sample, channel): a contiguous stretch of SPATIAL values
    base = y_ptr + pid.to(tl.int64) * SPATIAL
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, SPATIAL, BLOCK):
        r = i + tl.arange(0, BLOCK)
        s += tl.load(base + r, mask=r < SPATIAL, other=0.0)
    mean = tl.sum(s) / SPATIAL
    ss = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, SPATIAL, BLOCK):
        r = i + tl.arange(0, BLOCK)
        d = tl.where(r < SPATIAL, tl.load(base + r, mask=r < SPATIAL, other=0.0) - mean, 0.0)
        ss += d * d
    tl.store(mean_ptr + pid, mean)
    tl.store(var_ptr + pid, tl.sum(ss) / SPATIAL)


@triton.jit
def norm_clamp_mul_max_kernel(
    y_ptr,
    mean_ptr,
    var_ptr,
    mult_ptr,
    out_ptr,
    C,
    SPATIAL,
    eps,
    clamp_min,
    clamp_max,
    BLOCK_S: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    b = tl.program_id(0)
    pid_s = tl.program_id(1)
    rs = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    rc = tl.arange(0, BLOCK_C)
    cmask = rc < C
    mean = tl.load(mean_ptr + b * C + rc, mask=cmask, other=0.0)
    var = tl.load(var_ptr + b * C + rc, mask=cmask, other=1.0)
    rstd = 1.0 / tl.sqrt(var + eps)
    mult = tl.load(mult_ptr + rc, mask=cmask, other=0.0)
    mask = (rs[:, None] < SPATIAL) & cmask[None, :]
    v = tl.load(y_ptr + (b * C + rc[None, :]) * SPATIAL + rs[:, None], mask=mask, other=0.0)
    v = (v - mean[None, :]) * rstd[None, :]
    v = tl.minimum(tl.maximum(v, clamp_min), clamp_max) * mult[None, :]
    v = tl.where(mask, v, float("-inf"))
    tl.store(out_ptr + b * SPATIAL + rs, tl.max(v, axis=1), mask=rs < SPATIAL)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, multiplier_shape, clamp_min, clamp_max):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.multiplier = nn.Parameter(torch.randn(multiplier_shape))
        self.instance_norm = nn.InstanceNorm3d(out_channels)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def weight_taps(self, channels: int) -> torch.Tensor:
        """conv.weight (C_out, C_in, kd, kh, kw) as [taps (c, kd, kh, kw), channels], zero past C_out: a tap's
        weights of every channel in a row; made once per weight version and address."""
        w = self.conv.weight
        key = (w._version, w.data_ptr())
        if getattr(self, "_wk_key", None) != key:
            taps = torch.zeros((w[0].numel(), channels), device=w.device, dtype=torch.float32)
            taps[:, : w.shape[0]] = w.detach().reshape(w.shape[0], -1).T
            self._wk, self._wk_key = taps, key
        return self._wk

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.conv
        if conv.stride != (1, 1, 1) or conv.padding != (0, 0, 0) or conv.dilation != (1, 1, 1):
            raise ValueError("this kernel computes a stride-1, unpadded, undilated convolution")
        x = x.contiguous()
        B, C_IN, D, H, W = x.shape
        C_OUT, KS = conv.out_channels, conv.kernel_size[0]
        OD, OH, OW = D - KS + 1, H - KS + 1, W - KS + 1
        spatial = OD * OH * OW
        channels = triton.next_power_of_2(C_OUT)
        mult = self.multiplier.contiguous()  # (C_OUT, 1, 1, 1): one value per channel
        y = torch.empty((B, C_OUT, OD, OH, OW), device=x.device, dtype=x.dtype)
        conv3d_mul_kernel[(triton.cdiv(spatial, BLOCK_P), B)](
            x,
            self.weight_taps(channels),
            conv.bias,
            mult,
            y,
            C_OUT,
            D,
            H,
            W,
            OH,
            OW,
            spatial,
            C_IN=C_IN,
            KS=KS,
            CHANNELS=channels,
            BLOCK_P=BLOCK_P,
            num_warps=WARPS,
        )
        mean = torch.empty((B * C_OUT,), device=x.device, dtype=torch.float32)
        var = torch.empty((B * C_OUT,), device=x.device, dtype=torch.float32)
        instance_stats_kernel[(B * C_OUT,)](y, mean, var, spatial, BLOCK=STATS_BLOCK, num_warps=4)
        out = torch.empty((B, OD, OH, OW), device=x.device, dtype=x.dtype)
        norm_clamp_mul_max_kernel[(B, triton.cdiv(spatial, MAX_BLOCK_S))](
            y,
            mean,
            var,
            mult,
            out,
            C_OUT,
            spatial,
            self.instance_norm.eps,
            self.clamp_min,
            self.clamp_max,
            BLOCK_S=MAX_BLOCK_S,
            BLOCK_C=channels,
            num_warps=4,
        )
        return out
