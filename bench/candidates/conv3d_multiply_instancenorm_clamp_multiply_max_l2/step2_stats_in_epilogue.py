"""Conv3d, multiplier, InstanceNorm, clamp, multiplier and the max over channels in two Triton kernels, all in fp32:
a direct convolution on the FMA units (a program takes BLOCK_P consecutive output voxels of one sample and every
output channel, one load a tap times the tap's weights of every channel) writes its output with the bias added and
times the multiplier, and reduces its tile in registers to each channel's mean and mean-centred sum of squares; the
last program of a sample to finish (an atomic ticket) combines those partials with Chan's formula into the channel's
mean and biased variance. A second kernel normalizes each voxel's channels, clamps them, multiplies by the
multiplier again and writes their maximum.

Follows the top advice on step 1: "Fold the 2 kernel(s) after the convolution into its epilogue". What changed: the
separate statistics kernel, which read the 103 MB conv output back, is gone; the conv's epilogue writes per-tile
(mean, centred sum of squares) partials and its last program per sample combines them, so the output is written once
and read once, by the normalize-clamp-max pass (cheaper than recomputing the convolution there)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_P, WARPS = 128, 1
MAX_BLOCK_S = 64
COMBINE_TILES = 32  # partials the last program of a sample combines a step


@triton.jit
def conv3d_mul_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    mult_ptr,
    y_ptr,
    part_mean_ptr,
    part_m2_ptr,
    ticket_ptr,
    mean_ptr,
    var_ptr,
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
    COMBINE: tl.constexpr,
):
    tile = tl.program_id(0)
    n_tiles = tl.num_programs(0)
    b = tl.program_id(1)
    p = tile * BLOCK_P + tl.arange(0, BLOCK_P)
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
    # this tile's share of InstanceNorm's statistics, reduced in registers: each channel's mean over the tile's
    # voxels and the sum of squares about that mean (voxels past SPATIAL hold the bias alone: masked out)
    n_t = tl.minimum(SPATIAL - tile * BLOCK_P, BLOCK_P).to(tl.float32)
    t_mean = tl.sum(tl.where(p_ok[None, :], acc, 0.0), axis=1) / n_t
    dev = tl.where(p_ok[None, :], acc - t_mean[:, None], 0.0)
    part = (b * n_tiles + tile) * CHANNELS + co
    tl.store(part_mean_ptr + part, t_mean)
    tl.store(part_m2_ptr + part, tl.sum(dev * dev, axis=1))
    # every thread's partials stored before the ticket is taken (release); the sample's last program to take one
    # (acquire) combines all its tiles' partials with Chan's formula, a second pass about the sample's mean
    tl.debug_barrier()
    ticket = tl.atomic_add(ticket_ptr + b, 1, sem="acq_rel")
    if ticket == n_tiles - 1:
        rt = tl.arange(0, COMBINE)
        s = tl.zeros((CHANNELS,), dtype=tl.float32)
        for t0 in range(0, n_tiles, COMBINE):
            t = t0 + rt
            t_ok = t < n_tiles
            n = tl.minimum(SPATIAL - t * BLOCK_P, BLOCK_P).to(tl.float32)
            idx = (b * n_tiles + t[:, None]) * CHANNELS + co[None, :]
            m = tl.load(part_mean_ptr + idx, mask=t_ok[:, None], other=0.0, cache_modifier=".cg")
            s += tl.sum(tl.where(t_ok[:, None], n[:, None] * m, 0.0), axis=0)
        mean = s / SPATIAL
        q = tl.zeros((CHANNELS,), dtype=tl.float32)
        for t0 in range(0, n_tiles, COMBINE):
            t = t0 + rt
            t_ok = t < n_tiles
            n = tl.minimum(SPATIAL - t * BLOCK_P, BLOCK_P).to(tl.float32)
            idx = (b * n_tiles + t[:, None]) * CHANNELS + co[None, :]
            m = tl.load(part_mean_ptr + idx, mask=t_ok[:, None], other=0.0, cache_modifier=".cg")
            m2 = tl.load(part_m2_ptr + idx, mask=t_ok[:, None], other=0.0, cache_modifier=".cg")
            d = m - mean[None, :]
            q += tl.sum(tl.where(t_ok[:, None], m2 + n[:, None] * d * d, 0.0), axis=0)
        tl.store(mean_ptr + b * C_OUT + co, mean, mask=c_ok)
        tl.store(var_ptr + b * C_OUT + co, q / SPATIAL, mask=c_ok)
        tl.store(ticket_ptr + b, 0)  # the counter back at zero for the next forward


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

    def tickets(self, batch: int, device: torch.device) -> torch.Tensor:
        """One int32 counter a sample, zero between forwards (the conv's last program of a sample resets its own):
        made once per batch size and device, so a forward launches no memset."""
        t = getattr(self, "_tickets", None)
        if t is None or t.numel() < batch or t.device != device:
            t = torch.zeros((batch,), device=device, dtype=torch.int32)
            self._tickets = t
        return t

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
        n_tiles = triton.cdiv(spatial, BLOCK_P)
        part_mean = torch.empty((B, n_tiles, channels), device=x.device, dtype=torch.float32)
        part_m2 = torch.empty((B, n_tiles, channels), device=x.device, dtype=torch.float32)
        mean = torch.empty((B * C_OUT,), device=x.device, dtype=torch.float32)
        var = torch.empty((B * C_OUT,), device=x.device, dtype=torch.float32)
        conv3d_mul_kernel[(n_tiles, B)](
            x,
            self.weight_taps(channels),
            conv.bias,
            mult,
            y,
            part_mean,
            part_m2,
            self.tickets(B, x.device),
            mean,
            var,
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
            COMBINE=COMBINE_TILES,
            num_warps=WARPS,
        )
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
