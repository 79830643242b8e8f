"""Conv2d, a per-channel bias and scale, sigmoid and GroupNorm in two Triton kernels, all in fp32. A direct convolution
on the FMA units takes BLOCK_P consecutive output pixels of one sample and every output channel (per tap the pixels'
inputs from the NCHW input times the tap's weights of every channel, into a [channels, pixels] accumulator); its
epilogue adds the conv bias and the extra bias, multiplies by the scale, writes the sigmoid of that and reduces it in
registers to each group's mean over the tile and the sum of squared deviations from it, stored per (sample, group,
tile). A second kernel, a few programs per (sample, group), combines its group's tile partials in one pass with Chan's
formula into the mean and rstd and normalizes its stretch of the group in place, one channel at a time with that
channel's gamma (folded into rstd) and beta as scalars, 4096 values a step as 16-byte vector loads and stores.

Follows the top advice on step 3: "Hide memory latency: more bytes in flight and more work per program". What changed:
in the GroupNorm kernel only, every offset is written as a known multiple of 4 (when the spatial size is one) so the
loads and stores become 16-byte vectors, and a step covers 4096 values instead of 1024 (8 independent 16-byte loads a
thread issued before their first use, 64 registers, no spills); the tile partials are read in one pass, not two."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_P, WARPS = 128, 1
GN_BLOCK, GN_CHUNK, GN_TILES, GN_WARPS = 4096, 32768, 512, 4


@triton.jit
def conv2d_fma_sigmoid_stats_kernel(
    x_ptr,
    w_ptr,
    cb_ptr,
    bias_ptr,
    scale_ptr,
    y_ptr,
    mean_ptr,
    m2_ptr,
    C_IN,
    C_OUT,
    H,
    W,
    OW,
    SPATIAL,
    GROUPS,
    CPG,
    TILES,
    KS: tl.constexpr,
    CHANNELS: tl.constexpr,
    GROUPS_P2: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    t = tl.program_id(0)
    b = tl.program_id(1)
    p = t * BLOCK_P + tl.arange(0, BLOCK_P)
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
    ok = ch_ok[:, None] & p_ok[None, :]
    out = y_ptr + b.to(tl.int64) * C_OUT * SPATIAL + ch[:, None] * SPATIAL + p[None, :]
    tl.store(out, v, mask=ok)
    # the tile's statistics per group (channels g * CPG ... g * CPG + CPG - 1): its mean over the tile's valid values
    # and the sum of squared deviations from that mean (M2), so the finisher can combine tiles with Chan's formula;
    # each channel's mean and M2 over the tile's pixels first, then its group's channels combined the same way
    gi = tl.arange(0, GROUPS_P2)
    member = (ch // CPG)[None, :] == gi[:, None]  # [groups, channels]; channels past C_OUT fall past GROUPS
    n_p = tl.minimum(SPATIAL - t * BLOCK_P, BLOCK_P).to(tl.float32)
    ch_mean = tl.sum(tl.where(ok, v, 0.0), axis=1) / n_p
    d = tl.where(ok, v - ch_mean[:, None], 0.0)
    ch_m2 = tl.sum(d * d, axis=1)
    g_mean = tl.sum(tl.where(member, ch_mean[None, :], 0.0), axis=1) / CPG
    dm = tl.where(member, ch_mean[None, :] - g_mean[:, None], 0.0)
    g_m2 = tl.sum(tl.where(member, ch_m2[None, :], 0.0) + n_p * dm * dm, axis=1)
    part = (b * GROUPS + gi).to(tl.int64) * TILES + t
    g_ok = gi < GROUPS
    tl.store(mean_ptr + part, g_mean, mask=g_ok)
    tl.store(m2_ptr + part, g_m2, mask=g_ok)


@triton.jit
def groupnorm_apply_kernel(
    y_ptr,
    mean_ptr,
    m2_ptr,
    gamma_ptr,
    beta_ptr,
    GROUPS,
    CPG,
    SPATIAL,
    TILES,
    CHUNK,
    eps,
    TILE_P: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
):
    # one (sample, group) on axis 0, its channels contiguous (one stretch of CPG x SPATIAL values); CHUNK of them on
    # axis 1. First the group's mean and rstd from its tiles' (count, mean, M2) partials in one pass: each block of
    # partials combined into its own (count, mean, M2), merged into the running one by Chan's formula
    pid = tl.program_id(0)
    g = pid % GROUPS
    # SPATIAL and CHUNK are multiples of VEC (the host picks VEC so): written so, every offset below is known to be
    # one, which lets the loads and stores be VEC-wide vectors (16 bytes at VEC 4) under their masks
    sp = SPATIAL // VEC * VEC
    n = CPG * sp
    parts = pid.to(tl.int64) * TILES
    cnt = 0.0
    mean = 0.0
    m2 = 0.0
    for t0 in range(0, TILES, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        t_ok = t < TILES
        count = tl.where(t_ok, CPG * tl.minimum(sp - t * TILE_P, TILE_P), 0).to(tl.float32)
        t_mean = tl.load(mean_ptr + parts + t, mask=t_ok, other=0.0)
        t_m2 = tl.load(m2_ptr + parts + t, mask=t_ok, other=0.0)
        b_cnt = tl.sum(count)
        b_mean = tl.sum(count * t_mean) / b_cnt
        dm = t_mean - b_mean
        b_m2 = tl.sum(t_m2 + count * dm * dm)
        tot = cnt + b_cnt
        delta = b_mean - mean
        mean += delta * (b_cnt / tot)
        m2 += b_m2 + delta * delta * (cnt * b_cnt / tot)
        cnt = tot
    rstd = 1.0 / tl.sqrt(m2 / n + eps)
    # then its chunk of the group, normalized in place one channel's stretch at a time (gamma and beta scalars of the
    # channel), BLOCK values a step: BLOCK / (32 x warps) / VEC independent VEC-wide loads a thread, all issued before
    # the first use
    base = y_ptr + pid.to(tl.int64) * n
    start = tl.program_id(1) * (CHUNK // VEC * VEC)
    end = tl.minimum(start + CHUNK // VEC * VEC, n)
    for c in range(start // sp, (end - 1) // sp + 1):
        a = rstd * tl.load(gamma_ptr + g * CPG + c)
        beta = tl.load(beta_ptr + g * CPG + c)
        lo = tl.maximum(start, c * sp) // VEC * VEC
        hi = tl.minimum(end, c * sp + sp) // VEC * VEC
        for i in range(lo, hi, BLOCK):
            r = i + tl.arange(0, BLOCK)
            r_ok = r < hi
            v = tl.load(base + r, mask=r_ok, other=0.0)
            tl.store(base + r, (v - mean) * a + beta, mask=r_ok)


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
        G = gn.num_groups
        cpg = C_OUT // G
        OH, OW = H - KS + 1, W - KS + 1
        spatial = OH * OW
        tiles = triton.cdiv(spatial, BLOCK_P)
        y = torch.empty((B, C_OUT, OH, OW), device=x.device, dtype=x.dtype)
        # per (sample, group, tile): the tile's group mean and sum of squared deviations from it
        part_mean = torch.empty((B * G * tiles,), device=x.device, dtype=torch.float32)
        part_m2 = torch.empty_like(part_mean)
        conv2d_fma_sigmoid_stats_kernel[(tiles, B)](
            x,
            self.weight_taps(),
            conv.bias,
            self.bias,
            self.scale,
            y,
            part_mean,
            part_m2,
            C_IN,
            C_OUT,
            H,
            W,
            OW,
            spatial,
            G,
            cpg,
            tiles,
            KS=KS,
            CHANNELS=triton.next_power_of_2(C_OUT),
            GROUPS_P2=triton.next_power_of_2(G),
            BLOCK_P=BLOCK_P,
            num_warps=WARPS,
        )
        groupnorm_apply_kernel[(B * G, triton.cdiv(cpg * spatial, GN_CHUNK))](
            y,
            part_mean,
            part_m2,
            gn.weight,
            gn.bias,
            G,
            cpg,
            spatial,
            tiles,
            GN_CHUNK,
            gn.eps,
            TILE_P=BLOCK_P,
            BLOCK_T=GN_TILES,
            BLOCK=GN_BLOCK,
            VEC=4 if spatial % 4 == 0 else 2 if spatial % 2 == 0 else 1,
            num_warps=GN_WARPS,
        )
        return y
