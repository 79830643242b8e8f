"""ConvTranspose3d (stride 2), * scale1, AvgPool3d(2), + bias and * scale2 in two Triton kernels, all in fp32: a
direct transposed convolution on the FMA units, straight from the NCDHW input, takes the outputs one stride phase at a
time (o = stride j + p along each axis); a program holds BLOCK_P outputs of one phase of one sample times every output
channel as a [channels, BLOCK_P] accumulator and visits only the taps that meet its phase (k = r + stride t with
r = (p + padding) mod stride, reading input j + (p + padding) // stride - t), each tap one load of the input at the
outputs' offsets times the tap's weights of every channel (laid out [taps, channels] once per weight version); it
writes its output with the conv bias added and scale1 applied. An element-wise kernel, one pooled voxel a lane, then
averages each 2x2x2 window, adds the bias and applies scale2. The scales are read from their pointers, so no host sync.

Follows the top advice on step 0: "Compute the small convolution directly on the FMA units". What changed: the
convolution is no longer an implicit GEMM on tl.dot gathering all 27 taps with most masked away; it runs as exact fp32
multiply-adds per phase over only the taps that meet it, looping over (channel, kd, kh) with the kw taps unrolled,
128 outputs a program of one warp."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_P, WARPS = 128, 1
POOL_BLOCK, POOL_WARPS = 1024, 4


@triton.jit
def convt_fma_scale_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    s1_ptr,
    y_ptr,
    C_OUT,
    D,
    H,
    W,
    OD,
    OH,
    OW,
    JD,
    JH,
    JW,
    C_IN: tl.constexpr,
    KS: tl.constexpr,
    STRIDE: tl.constexpr,
    PAD: tl.constexpr,
    CHANNELS: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    # program (block of phase positions, sample, phase): outputs o = STRIDE j + p along each axis
    b = tl.program_id(1)
    phase = tl.program_id(2)
    pd = phase // (STRIDE * STRIDE)
    ph = (phase // STRIDE) % STRIDE
    pw = phase % STRIDE
    # the taps meeting phase p: k = r + STRIDE t, t < n, reading input j + q - t
    rd = (pd + PAD) % STRIDE
    rh = (ph + PAD) % STRIDE
    rw = (pw + PAD) % STRIDE
    qd = (pd + PAD) // STRIDE
    qh = (ph + PAD) // STRIDE
    qw = (pw + PAD) // STRIDE
    nd = (KS - rd + STRIDE - 1) // STRIDE
    nh = (KS - rh + STRIDE - 1) // STRIDE
    nw = (KS - rw + STRIDE - 1) // STRIDE
    q = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    jw = q % JW
    jh = (q // JW) % JH
    jd = q // (JW * JH)
    od = jd * STRIDE + pd
    oh = jh * STRIDE + ph
    ow = jw * STRIDE + pw
    p_ok = (jd < JD) & (od < OD) & (oh < OH) & (ow < OW)
    # input voxel of tap t = 0 along each axis; tap (td, th, tw) reads it minus (td, th, tw)
    id0 = jd + qd
    ih0 = jh + qh
    iw0 = jw + qw
    x_b = x_ptr + b.to(tl.int64) * C_IN * D * H * W
    pix = (id0 * H + ih0) * W + iw0
    co = tl.arange(0, CHANNELS)
    acc = tl.zeros((CHANNELS, BLOCK_P), dtype=tl.float32)
    # a loop over (c, kd, kh) of the phase's taps with its kw taps unrolled: unrolling every tap overflows the
    # instruction cache
    for cdh in range(C_IN * nd * nh):
        c = cdh // (nd * nh)
        td = (cdh // nh) % nd
        th = cdh % nh
        kd = rd + STRIDE * td
        kh = rh + STRIDE * th
        ok_dh = p_ok & (id0 >= td) & (id0 - td < D) & (ih0 >= th) & (ih0 - th < H)
        row = x_b + pix + ((c * D - td) * H - th) * W
        w_row = w_ptr + ((c * KS + kd) * KS + kh) * KS * CHANNELS + co
        for tw in tl.static_range((KS + STRIDE - 1) // STRIDE):
            if tw < nw:
                kw = rw + STRIDE * tw
                xv = tl.load(row - tw, mask=ok_dh & (iw0 >= tw) & (iw0 - tw < W), other=0.0)
                w = tl.load(w_row + kw * CHANNELS)
                acc += w[:, None] * xv[None, :]
    c_ok = co < C_OUT
    acc += tl.load(b_ptr + co, mask=c_ok, other=0.0)[:, None]
    acc = acc * tl.load(s1_ptr)
    spatial = OD * OH * OW
    y_b = y_ptr + b.to(tl.int64) * C_OUT * spatial
    out = y_b + co[:, None] * spatial + ((od * OH + oh) * OW + ow)[None, :]
    tl.store(out, acc, mask=c_ok[:, None] & p_ok[None, :])


@triton.jit
def avgpool_bias_scale_kernel(
    y_ptr, bias_ptr, s2_ptr, out_ptr, N, C, OD, OH, OW, PD, PH, PW, POOL: tl.constexpr, BLOCK: tl.constexpr
):
    # one pooled voxel (sample, channel, pd, ph, pw) a lane; floor mode: the windows never run past the input
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = r < N
    pw = r % PW
    ph = (r // PW) % PH
    pd = (r // (PW * PH)) % PD
    bc = r // (PW * PH * PD)
    base = bc * OD * OH * OW + (pd * POOL) * OH * OW + (ph * POOL) * OW + pw * POOL
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in tl.static_range(POOL):
        for j in tl.static_range(POOL):
            for k in tl.static_range(POOL):
                s += tl.load(y_ptr + base + i * OH * OW + j * OW + k, mask=ok, other=0.0)
    v = s / (POOL * POOL * POOL) + tl.load(bias_ptr + bc % C, mask=ok, other=0.0)
    tl.store(out_ptr + r, v * tl.load(s2_ptr), mask=ok)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, scale1, scale2, bias_shape):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.scale1 = nn.Parameter(torch.tensor(scale1))
        self.avg_pool = nn.AvgPool3d(kernel_size=2)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scale2 = nn.Parameter(torch.tensor(scale2))

    def weight_taps(self, channels: int) -> torch.Tensor:
        """conv_transpose.weight (C_in, C_out, kd, kh, kw) as [taps (c, kd, kh, kw), channels], the output channels
        zero-padded to a power of two; made once per weight version and address."""
        w = self.conv_transpose.weight
        key = (w._version, w.data_ptr())
        if getattr(self, "_wt_key", None) != key:
            c_in, c_out = w.shape[0], w.shape[1]
            taps = w.detach().reshape(c_in, c_out, -1).permute(0, 2, 1).reshape(-1, c_out)
            padded = torch.zeros((taps.shape[0], channels), device=w.device, dtype=w.dtype)
            padded[:, :c_out] = taps
            self._wt, self._wt_key = padded, key
        return self._wt

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ct = self.conv_transpose
        x = x.contiguous()
        B, C_IN, D, H, W = x.shape
        C_OUT, KS, S, PAD, OPAD = ct.out_channels, ct.kernel_size[0], ct.stride[0], ct.padding[0], ct.output_padding[0]
        OD, OH, OW = ((n - 1) * S - 2 * PAD + KS + OPAD for n in (D, H, W))
        JD, JH, JW = triton.cdiv(OD, S), triton.cdiv(OH, S), triton.cdiv(OW, S)
        channels = triton.next_power_of_2(C_OUT)
        y = torch.empty((B, C_OUT, OD, OH, OW), device=x.device, dtype=x.dtype)
        convt_fma_scale_kernel[(triton.cdiv(JD * JH * JW, BLOCK_P), B, S * S * S)](
            x,
            self.weight_taps(channels),
            ct.bias,
            self.scale1,
            y,
            C_OUT,
            D,
            H,
            W,
            OD,
            OH,
            OW,
            JD,
            JH,
            JW,
            C_IN=C_IN,
            KS=KS,
            STRIDE=S,
            PAD=PAD,
            CHANNELS=channels,
            BLOCK_P=BLOCK_P,
            num_warps=WARPS,
        )
        P = self.avg_pool.kernel_size
        PD, PH, PW = OD // P, OH // P, OW // P
        out = torch.empty((B, C_OUT, PD, PH, PW), device=x.device, dtype=x.dtype)
        N = out.numel()
        avgpool_bias_scale_kernel[(triton.cdiv(N, POOL_BLOCK),)](
            y,
            self.bias,
            self.scale2,
            out,
            N,
            C_OUT,
            OD,
            OH,
            OW,
            PD,
            PH,
            PW,
            POOL=P,
            BLOCK=POOL_BLOCK,
            num_warps=POOL_WARPS,
        )
        return out
