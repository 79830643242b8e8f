"""ConvTranspose3d (stride 2), * scale1, AvgPool3d(2), + bias and * scale2 in two Triton kernels, all in fp32: the
transposed convolution gathered per output voxel as an implicit GEMM on the FMA pipe (tl.dot with
input_precision="ieee", so it holds at 1e-4; rows are output voxels, columns output channels, K = C_in x 27 taps
flattened, since 3 input channels are too few for a K block of their own; output o takes input (o + padding - k) /
stride where that divides and falls inside, the other taps masked to zero; 64x16 tiles, 16 of K a step) writes its
output with the conv bias added and scale1 applied; an element-wise kernel, one pooled voxel a lane, then averages
each 2x2x2 window, adds the bias and applies scale2. The scales are read from their pointers, so no host sync."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

TILE_M, TILE_N, TILE_K, WARPS = 64, 16, 16, 4
POOL_BLOCK, POOL_WARPS = 1024, 4


@triton.jit
def convt_scale_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
    s1_ptr,
    y_ptr,
    M,
    C_IN,
    C_OUT,
    D,
    H,
    W,
    OD,
    OH,
    OW,
    KS: tl.constexpr,
    STRIDE: tl.constexpr,
    PAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ow = rm % OW
    oh = (rm // OW) % OH
    od = (rm // (OW * OH)) % OD
    b = rm // (OW * OH * OD)
    m_ok = rm < M
    n_ok = rn < C_OUT
    K = C_IN * KS * KS * KS
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        k_ok = rk < K
        ci = rk // (KS * KS * KS)
        tap = rk % (KS * KS * KS)
        kd = tap // (KS * KS)
        kh = (tap // KS) % KS
        kw = tap % KS
        # output o takes input (o + PAD - k) / STRIDE where that is a whole index inside the input
        td = od[:, None] + PAD - kd[None, :]
        th = oh[:, None] + PAD - kh[None, :]
        tw = ow[:, None] + PAD - kw[None, :]
        i_d = td // STRIDE
        ih = th // STRIDE
        iw = tw // STRIDE
        ok = (td >= 0) & (td % STRIDE == 0) & (i_d < D)
        ok &= (th >= 0) & (th % STRIDE == 0) & (ih < H)
        ok &= (tw >= 0) & (tw % STRIDE == 0) & (iw < W)
        ok &= m_ok[:, None] & k_ok[None, :]
        a_off = (b[:, None] * C_IN + ci[None, :]) * D * H * W + i_d * H * W + ih * W + iw
        a = tl.load(x_ptr + a_off, mask=ok, other=0.0)
        # ConvTranspose3d weight: (C_in, C_out, kd, kh, kw), so element (ci, co, tap) sits at (ci C_OUT + co) 27 + tap
        w_off = (ci[:, None] * C_OUT + rn[None, :]) * (KS * KS * KS) + tap[:, None]
        w = tl.load(w_ptr + w_off, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a, w, acc, input_precision="ieee")
    acc += tl.load(b_ptr + rn, mask=n_ok, other=0.0)[None, :]
    acc = acc * tl.load(s1_ptr)
    spatial = OD * OH * OW
    out = y_ptr + (b * C_OUT * spatial + od * OH * OW + oh * OW + ow)[:, None] + rn[None, :] * spatial
    tl.store(out, acc, mask=m_ok[:, None] & n_ok[None, :])


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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ct = self.conv_transpose
        x = x.contiguous()
        B, C_IN, D, H, W = x.shape
        C_OUT, KS, S, PAD, OPAD = ct.out_channels, ct.kernel_size[0], ct.stride[0], ct.padding[0], ct.output_padding[0]
        OD, OH, OW = ((n - 1) * S - 2 * PAD + KS + OPAD for n in (D, H, W))
        y = torch.empty((B, C_OUT, OD, OH, OW), device=x.device, dtype=x.dtype)
        M = B * OD * OH * OW
        convt_scale_kernel[(triton.cdiv(M, TILE_M), triton.cdiv(C_OUT, TILE_N))](
            x,
            ct.weight,
            ct.bias,
            self.scale1,
            y,
            M,
            C_IN,
            C_OUT,
            D,
            H,
            W,
            OD,
            OH,
            OW,
            KS=KS,
            STRIDE=S,
            PAD=PAD,
            BLOCK_M=TILE_M,
            BLOCK_N=TILE_N,
            BLOCK_K=TILE_K,
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
