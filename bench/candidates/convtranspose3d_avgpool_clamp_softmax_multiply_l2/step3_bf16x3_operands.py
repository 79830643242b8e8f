"""AvgPool3d, ConvTranspose3d (stride 2), clamp, softmax over each channel's voxels and a per-channel scale in three
Triton kernels, as step 1 (the pool; the tensor-core transposed convolution per stride phase), with the softmax's sum
found in the convolution's epilogue and a single normalizing pass after it.

Follows the top advice on step 2: "Keep the tensor cores fed (TMA, deeper pipeline, bigger persistent tiles)", by
what it names where the MMAs wait on shared memory: fewer shared-memory reads per MMA, with bf16 operands. The
products are bf16x3 (hi x hi + hi x lo + lo x hi, fp32 accumulator) instead of tf32x3: the weight is split once per
weight version into bf16 hi and lo [27 taps x C_in, C_out] tiles that cp.async puts straight into wgmma's swizzled
shared tiles (tf32x3 loaded the fp32 tile, split it in registers and stored hi and lo back, transposed, every K
step), and a wgmma k-step of bf16 reads half the shared bytes per product of tf32's; the pooled input's tile is split
in registers as step 2's was. Everything else as step 2 (the passes, tiles, grid and epilogue)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

TILE_M, TILE_N, TILE_K, WARPS = 64, 64, 32, 4
SCALE_BLOCK = 4096
# exp(v - clamp_max) for clamp_min <= v stays a normal fp32 number while the clamp's range is under this
MAX_CLAMP_RANGE = 80.0


@triton.jit
def avgpool3d_kernel(x_ptr, p_ptr, N, D, H, W, PD, PH, PW, POOL: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = r < N
    pw = r % PW
    ph = (r // PW) % PH
    pd = (r // (PW * PH)) % PD
    bc = r // (PW * PH * PD)  # (sample, channel)
    base = bc * D * H * W + (pd * POOL) * H * W + (ph * POOL) * W + pw * POOL
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in tl.static_range(POOL):
        for j in tl.static_range(POOL):
            for k in tl.static_range(POOL):
                s += tl.load(x_ptr + base + i * H * W + j * W + k, mask=ok, other=0.0)
    tl.store(p_ptr + r, s * (1.0 / (POOL * POOL * POOL)), mask=ok)


@triton.jit
def convt_clamp_exp_kernel(
    x_ptr, w_hi_ptr, w_lo_ptr, b_ptr, y_ptr, sum_ptr, C_IN, C_OUT, D, H, W, OD, OH, OW, DP, HP, WP, LO, HI,
    KS: tl.constexpr, STRIDE: tl.constexpr, PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    MS = DP * HP * WP  # voxels of one phase in one sample (those that fall out masked)
    # the phases of one tile run side by side: together they write whole sectors of the output, which L2 then
    # writes back once instead of reading and writing each sector per phase
    phase = tl.program_id(0) % (STRIDE * STRIDE * STRIDE)
    tile = tl.program_id(0) // (STRIDE * STRIDE * STRIDE)
    tiles_per_sample = tl.cdiv(MS, BLOCK_M)
    b = tile // tiles_per_sample  # a tile stays inside one sample, so its column sums belong to one row each
    pd = phase // (STRIDE * STRIDE)
    ph = (phase // STRIDE) % STRIDE
    pw = phase % STRIDE
    rm = (tile % tiles_per_sample) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    jw = rm % WP
    jh = (rm // WP) % HP
    jd = rm // (WP * HP)
    od = jd * STRIDE + pd
    oh = jh * STRIDE + ph
    ow = jw * STRIDE + pw
    m_ok = (rm < MS) & (od < OD) & (oh < OH) & (ow < OW)
    n_ok = rn < C_OUT
    # Output o = STRIDE j + p takes input (o + PAD - k) / STRIDE where that divides: the taps k = r, r + STRIDE, ...
    # with r = (p + PAD) % STRIDE, at input j + q - t for the t-th of them, q = (p + PAD) // STRIDE.
    rd = (pd + PAD) % STRIDE
    rh = (ph + PAD) % STRIDE
    rw = (pw + PAD) % STRIDE
    nd = (KS - rd + STRIDE - 1) // STRIDE
    nh = (KS - rh + STRIDE - 1) // STRIDE
    nw = (KS - rw + STRIDE - 1) // STRIDE
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # K walks this phase's taps, C_IN channels each (BLOCK_K divides C_IN)
    for k0 in range(0, nd * nh * nw * C_IN, BLOCK_K):
        t = k0 // C_IN
        td = t // (nh * nw)
        th = (t // nw) % nh
        tw = t % nw
        i_d = jd + (pd + PAD) // STRIDE - td
        ih = jh + (ph + PAD) // STRIDE - th
        iw = jw + (pw + PAD) // STRIDE - tw
        ok = m_ok & (i_d >= 0) & (i_d < D) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        ci = k0 % C_IN + rk
        row = b * C_IN * D * H * W + i_d * H * W + ih * W + iw
        # [BLOCK_K, BLOCK_M]: consecutive threads read consecutive voxels of one channel
        a = tl.trans(tl.load(x_ptr + ci[:, None] * D * H * W + row[None, :], mask=ok[None, :], other=0.0))
        # the weight as [27 taps x C_in, C_out] bf16 hi and lo: this tap's rows
        tap = ((rd + td * STRIDE) * KS + rh + th * STRIDE) * KS + rw + tw * STRIDE
        w_off = (tap * C_IN + ci)[:, None] * C_OUT + rn[None, :]
        w_hi = tl.load(w_hi_ptr + w_off, mask=n_ok[None, :], other=0.0)
        w_lo = tl.load(w_lo_ptr + w_off, mask=n_ok[None, :], other=0.0)
        # bf16x3: a = a_hi + a_lo to 16 bits; the lo x lo term (2^-18 of the product) is dropped; small terms first
        a_hi = a.to(tl.bfloat16)
        a_lo = (a - a_hi.to(tl.float32)).to(tl.bfloat16)
        acc = tl.dot(a_lo, w_hi, acc)
        acc = tl.dot(a_hi, w_lo, acc)
        acc = tl.dot(a_hi, w_hi, acc)
    v = acc + tl.load(b_ptr + rn, mask=n_ok, other=0.0)[None, :]
    v = tl.minimum(tl.maximum(v, LO), HI)
    # softmax's numerator, shifted by HI (no clamped value exceeds it); the rows' sums go to the buffer
    e = tl.where(m_ok[:, None], tl.exp(v - HI), 0.0)
    tl.atomic_add(sum_ptr + b * C_OUT + rn, tl.sum(e, axis=0), mask=n_ok)
    spatial = OD * OH * OW
    out = y_ptr + (b * C_OUT * spatial + od * OH * OW + oh * OW + ow)[:, None] + rn[None, :] * spatial
    tl.store(out, e, mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def softmax_scale_kernel(y_ptr, sum_ptr, scale_ptr, C, N, BLOCK: tl.constexpr):
    # one stretch of one (sample, channel) row: numerator x scale / the row's sum, in place
    bc = tl.program_id(1)
    k = tl.load(scale_ptr + bc % C) / tl.load(sum_ptr + bc)
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    p = y_ptr + bc.to(tl.int64) * N + r
    tl.store(p, tl.load(p, mask=r < N) * k, mask=r < N)


class ModelNew(nn.Module):
    def __init__(
        self, in_channels, out_channels, kernel_size, stride, padding, output_padding, pool_kernel_size, clamp_min,
        clamp_max,
    ):
        super().__init__()
        self.pool = pool_kernel_size
        self.conv_transpose = nn.ConvTranspose3d(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, output_padding=output_padding
        )
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max
        self.scale = nn.Parameter(torch.ones(1, out_channels, 1, 1, 1))

    def weight_kn(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The weight (C_in, C_out, kd, kh, kw) as [27 taps x C_in, C_out], split into bf16 hi and lo (hi + lo holds
        16 bits of each value), made once per weight version."""
        w = self.conv_transpose.weight
        key = (w._version, w.data_ptr(), w.device)
        if getattr(self, "_wk_key", None) != key:
            wk = w.detach().permute(2, 3, 4, 0, 1).reshape(-1, w.shape[1]).contiguous()
            hi = wk.to(torch.bfloat16)
            self._wk = (hi, (wk - hi.float()).to(torch.bfloat16))
            self._wk_key = key
        return self._wk

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ct = self.conv_transpose
        x = x.contiguous()
        B, C_IN, D0, H0, W0 = x.shape
        D, H, W = D0 // self.pool, H0 // self.pool, W0 // self.pool
        pooled = torch.empty((B, C_IN, D, H, W), device=x.device, dtype=x.dtype)
        n = pooled.numel()
        avgpool3d_kernel[(triton.cdiv(n, 1024),)](x, pooled, n, D0, H0, W0, D, H, W, POOL=self.pool, BLOCK=1024)
        C_OUT, KS, S, PAD, OPAD = ct.out_channels, ct.kernel_size[0], ct.stride[0], ct.padding[0], ct.output_padding[0]
        OD, OH, OW = ((i - 1) * S - 2 * PAD + KS + OPAD for i in (D, H, W))
        DP, HP, WP = triton.cdiv(OD, S), triton.cdiv(OH, S), triton.cdiv(OW, S)
        if C_IN % TILE_K:
            raise ValueError(f"this kernel takes input channels in steps of {TILE_K}; got {C_IN} channels")
        if not self.clamp_max - self.clamp_min < MAX_CLAMP_RANGE:
            raise ValueError(
                f"the softmax is shifted by clamp_max, which needs clamp_max - clamp_min under {MAX_CLAMP_RANGE}; "
                f"got clamp({self.clamp_min}, {self.clamp_max})"
            )
        y = torch.empty((B, C_OUT, OD, OH, OW), device=x.device, dtype=x.dtype)
        sums = torch.zeros((B, C_OUT), device=x.device, dtype=torch.float32)
        grid = (S * S * S * B * triton.cdiv(DP * HP * WP, TILE_M), triton.cdiv(C_OUT, TILE_N))
        w_hi, w_lo = self.weight_kn()
        convt_clamp_exp_kernel[grid](
            pooled, w_hi, w_lo, ct.bias, y, sums, C_IN, C_OUT, D, H, W, OD, OH, OW, DP, HP, WP,
            self.clamp_min, self.clamp_max,
            KS=KS, STRIDE=S, PAD=PAD, BLOCK_M=TILE_M, BLOCK_N=TILE_N, BLOCK_K=TILE_K, num_warps=WARPS,
        )
        spatial = OD * OH * OW
        softmax_scale_kernel[(triton.cdiv(spatial, SCALE_BLOCK), B * C_OUT)](
            y, sums, self.scale, C_OUT, spatial, BLOCK=SCALE_BLOCK, num_warps=8,
        )
        return y
