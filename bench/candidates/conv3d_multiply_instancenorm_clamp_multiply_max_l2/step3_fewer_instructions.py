"""Conv3d, multiplier, InstanceNorm, clamp, multiplier and the max over channels in two Triton kernels, all in fp32:
a direct convolution on the FMA units (a program takes BLOCK_P consecutive output voxels of one sample and every
output channel, one load a tap times the tap's weights of every channel) writes its output with the bias added and
times the multiplier, and reduces its tile in registers to each channel's mean and mean-centred sum of squares; the
last program of a sample to finish (an atomic ticket) combines those partials with Chan's formula into the channel's
mean and biased variance. A second kernel walks 2048 voxels of a sample a program as [channels, 512 voxels] blocks,
normalizes, clamps and multiplies each voxel's channels and writes their maximum.

Follows the top advice on step 2: "Spend the issue slots on math: more outputs per loaded value". What changed: the
normalize-clamp-max kernel's block is now [channels, voxels] with the channel count and volume as tl.constexpr, so a
thread holds every channel of 4 consecutive voxels: 16-byte loads at compile-time row offsets, an in-thread max over
channels, and the per-channel constants (mean, 1/std, multiplier) loaded once for 2048 voxels instead of 64."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_P, WARPS = 128, 1
MAX_BLOCK_S, MAX_TILES, MAX_WARPS = 512, 4, 4  # 4 voxels a thread a block: 128 threads x 4 = 512
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
    eps,
    clamp_min,
    clamp_max,
    C: tl.constexpr,
    SPATIAL: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_S: tl.constexpr,
    TILES: tl.constexpr,
):
    # a program takes TILES * BLOCK_S consecutive voxels of one sample, BLOCK_S at a time, as a [channels, voxels]
    # block: a thread holds every channel of 4 consecutive voxels, so each channel row is one 16-byte load at a
    # compile-time offset (C and SPATIAL constexpr) and the max over channels stays in the thread's registers
    b = tl.program_id(0)
    rc = tl.arange(0, BLOCK_C)
    c_ok = rc < C
    # the per-channel constants, once a program for all its TILES blocks
    mean = tl.load(mean_ptr + b * C + rc, mask=c_ok, other=0.0)
    rstd = 1.0 / tl.sqrt(tl.load(var_ptr + b * C + rc, mask=c_ok, other=1.0) + eps)
    mult = tl.load(mult_ptr + rc, mask=c_ok, other=0.0)
    y_b = y_ptr + b.to(tl.int64) * (C * SPATIAL)
    out_b = out_ptr + b.to(tl.int64) * SPATIAL
    rows = rc[:, None] * SPATIAL
    first = tl.program_id(1) * (TILES * BLOCK_S)
    for t in tl.static_range(TILES):
        s = first + t * BLOCK_S + tl.arange(0, BLOCK_S)
        s_ok = s < SPATIAL
        if BLOCK_C == C:
            v = tl.load(y_b + rows + s[None, :], mask=s_ok[None, :], other=0.0)
        else:
            v = tl.load(y_b + rows + s[None, :], mask=c_ok[:, None] & s_ok[None, :], other=0.0)
        v = (v - mean[:, None]) * rstd[:, None]
        v = tl.minimum(tl.maximum(v, clamp_min), clamp_max) * mult[:, None]
        if BLOCK_C != C:
            v = tl.where(c_ok[:, None], v, float("-inf"))
        tl.store(out_b + s, tl.max(v, axis=0), mask=s_ok)


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
        norm_clamp_mul_max_kernel[(B, triton.cdiv(spatial, MAX_BLOCK_S * MAX_TILES))](
            y,
            mean,
            var,
            mult,
            out,
            self.instance_norm.eps,
            self.clamp_min,
            self.clamp_max,
            C=C_OUT,
            SPATIAL=spatial,
            BLOCK_C=channels,
            BLOCK_S=MAX_BLOCK_S,
            TILES=MAX_TILES,
            num_warps=MAX_WARPS,
        )
        return out
