"""ConvTranspose3d (stride 2), * scale1, AvgPool3d(2), + bias and * scale2 in two Triton kernels, all in fp32: a
direct transposed convolution on the FMA units, straight from the NCDHW input, takes the outputs one (depth, height)
stride phase at a time but every width phase together (o = stride j + p along each axis); a program holds BLOCK_J
positions j of one sample times all stride phases along the width times every output channel as a
[channels, BLOCK_J, stride] accumulator and visits only the taps that meet each phase (k = r + stride t with
r = (p + padding) mod stride, reading input j + (p + padding) // stride - t), each tap one load of the input times the
tap's weights of every channel and width phase (laid out [taps, channels] once per weight version); the accumulator,
the conv bias added and scale1 applied, is flattened in registers to [channels, BLOCK_J x stride], whose last axis
(index j stride + pw) runs along the output rows (ow = stride jw + pw), and stored from that 2-D tile, so a warp's
lanes write consecutive addresses of one row. A pooling kernel, one pooled voxel a row of a [BLOCK, window] tile, then
loads each window row along its contiguous axis, averages each 2x2x2 window, adds the bias and applies scale2. The
scales are read from their pointers, so no host sync.

Follows the top advice on step 2: "Coalesce global memory accesses". What changed: the convolution's output is no
longer stored as a 3-D [channels, BLOCK_J, stride] tile, whose lanes the compiler laid across the output channels (a
warp's store touching 16 channel planes), but reshaped to [channels, BLOCK_J x stride] with the row-contiguous axis
last and its offsets taken from one tl.arange along it, so the lanes of a store run along an output row; the
arithmetic is the same."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_J, WARPS = 64, 1
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
    SW: tl.constexpr,
    BLOCK_J: tl.constexpr,
):
    # program (block of positions j, sample, (depth, height) phase): outputs o = STRIDE j + p along each axis, every
    # width phase pw < STRIDE held on the last axis of the tile
    b = tl.program_id(1)
    phase = tl.program_id(2)
    pd = phase // STRIDE
    ph = phase % STRIDE
    # the taps meeting phase p: k = r + STRIDE t, t < n, reading input j + q - t
    rd = (pd + PAD) % STRIDE
    rh = (ph + PAD) % STRIDE
    qd = (pd + PAD) // STRIDE
    qh = (ph + PAD) // STRIDE
    nd = (KS - rd + STRIDE - 1) // STRIDE
    nh = (KS - rh + STRIDE - 1) // STRIDE
    pw = tl.arange(0, SW)
    pw_ok = pw < STRIDE
    rw = (pw + PAD) % STRIDE
    qw = (pw + PAD) // STRIDE
    nw = (KS - rw + STRIDE - 1) // STRIDE
    q = tl.program_id(0) * BLOCK_J + tl.arange(0, BLOCK_J)
    jw = q % JW
    jh = (q // JW) % JH
    jd = q // (JW * JH)
    od = jd * STRIDE + pd
    oh = jh * STRIDE + ph
    j_ok = (jd < JD) & (od < OD) & (oh < OH)
    # input voxel of tap t = 0 along each axis; tap (td, th, tw) reads it minus (td, th, tw)
    id0 = jd + qd
    ih0 = jh + qh
    iw0 = jw[:, None] + qw[None, :]
    x_b = x_ptr + b.to(tl.int64) * C_IN * D * H * W
    pix = (id0 * H + ih0)[:, None] * W + iw0
    co = tl.arange(0, CHANNELS)
    acc = tl.zeros((CHANNELS, BLOCK_J, SW), dtype=tl.float32)
    # a loop over (c, kd, kh) of the phase's taps with the kw taps of every width phase unrolled: unrolling every tap
    # overflows the instruction cache
    for cdh in range(C_IN * nd * nh):
        c = cdh // (nd * nh)
        td = (cdh // nh) % nd
        th = cdh % nh
        kd = rd + STRIDE * td
        kh = rh + STRIDE * th
        ok_dh = j_ok & (id0 >= td) & (id0 - td < D) & (ih0 >= th) & (ih0 - th < H)
        row = x_b + pix + ((c * D - td) * H - th) * W
        w_row = w_ptr + ((c * KS + kd) * KS + kh) * KS * CHANNELS
        for tw in tl.static_range((KS + STRIDE - 1) // STRIDE):
            tap_ok = pw_ok & (tw < nw)
            kw = rw + STRIDE * tw
            xv = tl.load(row - tw, mask=ok_dh[:, None] & tap_ok[None, :] & (iw0 >= tw) & (iw0 - tw < W), other=0.0)
            w = tl.load(w_row + kw[None, :] * CHANNELS + co[:, None], mask=tap_ok[None, :], other=0.0)
            acc += w[:, None, :] * xv[None, :, :]
    c_ok = co < C_OUT
    acc += tl.load(b_ptr + co, mask=c_ok, other=0.0)[:, None, None]
    acc = acc * tl.load(s1_ptr)
    # the store as a 2-D [channels, BLOCK_J * SW] tile whose last axis, flat index i = j * SW + pw, is contiguous
    # along an output row (ow = STRIDE jw + pw): the lanes of a warp run along it, not across the channel planes
    i = tl.arange(0, BLOCK_J * SW)
    qs = tl.program_id(0) * BLOCK_J + i // SW
    pws = i % SW
    jws = qs % JW
    jhs = (qs // JW) % JH
    jds = qs // (JW * JH)
    ods = jds * STRIDE + pd
    ohs = jhs * STRIDE + ph
    ows = jws * STRIDE + pws
    s_ok = (jds < JD) & (ods < OD) & (ohs < OH) & (pws < STRIDE) & (ows < OW)
    spatial = OD * OH * OW
    y_b = y_ptr + b.to(tl.int64) * C_OUT * spatial
    out = y_b + co[:, None] * spatial + ((ods * OH + ohs) * OW + ows)[None, :]
    tl.store(out, tl.reshape(acc, (CHANNELS, BLOCK_J * SW)), mask=c_ok[:, None] & s_ok[None, :])


@triton.jit
def avgpool_bias_scale_kernel(
    y_ptr,
    bias_ptr,
    s2_ptr,
    out_ptr,
    N,
    C,
    OD,
    OH,
    OW,
    PD,
    PH,
    PW,
    POOL: tl.constexpr,
    POOL_P: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # one pooled voxel (sample, channel, pd, ph, pw) a row of a [BLOCK, POOL_P] tile whose columns are the window's
    # contiguous elements along the width, so consecutive lanes read consecutive addresses; floor mode: the windows
    # never run past the input
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = r < N
    pw = r % PW
    ph = (r // PW) % PH
    pd = (r // (PW * PH)) % PD
    bc = r // (PW * PH * PD)
    base = bc * OD * OH * OW + (pd * POOL) * OH * OW + (ph * POOL) * OW + pw * POOL
    k = tl.arange(0, POOL_P)
    tile = base[:, None] + k[None, :]
    tile_ok = ok[:, None] & (k < POOL)[None, :]
    s = tl.zeros((BLOCK, POOL_P), dtype=tl.float32)
    for i in tl.static_range(POOL):
        for j in tl.static_range(POOL):
            s += tl.load(y_ptr + tile + i * OH * OW + j * OW, mask=tile_ok, other=0.0)
    v = tl.sum(s, axis=1) / (POOL * POOL * POOL) + tl.load(bias_ptr + bc % C, mask=ok, other=0.0)
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
        convt_fma_scale_kernel[(triton.cdiv(JD * JH * JW, BLOCK_J), B, S * S)](
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
            SW=triton.next_power_of_2(S),
            BLOCK_J=BLOCK_J,
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
            POOL_P=triton.next_power_of_2(P),
            BLOCK=POOL_BLOCK,
            num_warps=POOL_WARPS,
        )
        return out
