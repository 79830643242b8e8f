"""Conv3d, the softmax over channels and two MaxPool3d in two Triton kernels, all in fp32: the convolution as an
implicit GEMM on the FMA pipe (tl.dot with input_precision="ieee", so it holds at 1e-4; rows are output voxels,
columns output channels, all of them in one tile, K = C_in x taps flattened and masked to the K block; 64x16 tiles,
16 of K a step) adds the bias and takes each voxel's softmax over its row of channels in the epilogue, writing the
probabilities; a second kernel computes both max pools at once, one output value per lane: with stride equal to the
window and floor mode, pool2's window p covers pool1's windows p*k .. p*k + k - 1, hence the convolution's voxels
p*k*k .. p*k*k + k*k - 1, all inside the first pool's floor(n / k) * k, so the max over that k*k window, with output
sizes floor(floor(n / k) / k), is exactly what the two pools return."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

TILE_M, TILE_K, WARPS = 64, 16, 4
POOL_BLOCK, POOL_WARPS = 256, 4


@triton.jit
def conv3d_softmax_kernel(
    x_ptr,
    w_ptr,
    b_ptr,
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
    KD: tl.constexpr,
    KH: tl.constexpr,
    KW: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)  # every output channel in the one tile: the softmax needs the whole row
    # output voxel -> (sample, od, oh, ow); stride 1, no padding: input (od + kd, oh + kh, ow + kw)
    ow = rm % OW
    oh = (rm // OW) % OH
    od = (rm // (OW * OH)) % OD
    b = rm // (OW * OH * OD)
    row = b * C_IN * D * H * W + od * H * W + oh * W + ow
    TAPS: tl.constexpr = KD * KH * KW
    K = C_IN * TAPS
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        ci = rk // TAPS
        tap = rk % TAPS
        col = ci * D * H * W + (tap // (KH * KW)) * H * W + ((tap // KW) % KH) * W + tap % KW
        a = tl.load(x_ptr + row[:, None] + col[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < C_OUT) & (rk[:, None] < K), other=0.0)
        acc = tl.dot(a, w, acc, input_precision="ieee")
    acc += tl.load(b_ptr + rn, mask=rn < C_OUT, other=0.0)[None, :]
    # softmax over the channels of each voxel; padding columns count as -inf
    acc = tl.where(rn[None, :] < C_OUT, acc, float("-inf"))
    e = tl.exp(acc - tl.max(acc, axis=1)[:, None])
    p = e / tl.sum(e, axis=1)[:, None]
    spatial = OD * OH * OW
    out = y_ptr + (b * C_OUT * spatial + od * OH * OW + oh * OW + ow)[:, None] + rn[None, :] * spatial
    tl.store(out, p, mask=(rm[:, None] < M) & (rn[None, :] < C_OUT))


@triton.jit
def double_maxpool3d_kernel(
    y_ptr,
    out_ptr,
    N,
    D,
    H,
    W,
    PD,
    PH,
    PW,
    WD: tl.constexpr,
    WH: tl.constexpr,
    WW: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # one lane per output value of the second pool; (WD, WH, WW) = the product of the two pools' windows, which is
    # also the stride; (PD, PH, PW) = the second pool's output sizes, so every window lies inside (D, H, W)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    pw = offs % PW
    ph = (offs // PW) % PH
    pd = (offs // (PW * PH)) % PD
    bc = offs // (PW * PH * PD)  # sample x channel, contiguous planes of D x H x W
    base = bc * D * H * W + (pd * WD) * H * W + (ph * WH) * W + pw * WW
    m = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
    for i in tl.static_range(WD):
        for j in tl.static_range(WH):
            for k in tl.static_range(WW):
                v = tl.load(y_ptr + base + i * H * W + j * W + k, mask=mask, other=float("-inf"))
                m = tl.maximum(m, v)
    tl.store(out_ptr + offs, m, mask=mask)


def _triple(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v, v)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.pool_kernel_size = _triple(pool_kernel_size)  # MaxPool3d(k): stride k, no padding, floor mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, C_IN, D, H, W = x.shape
        C_OUT = self.conv.out_channels
        KD, KH, KW = self.conv.kernel_size
        OD, OH, OW = D - KD + 1, H - KH + 1, W - KW + 1
        y = torch.empty((B, C_OUT, OD, OH, OW), device=x.device, dtype=x.dtype)
        M = B * OD * OH * OW
        BLOCK_N = max(16, triton.next_power_of_2(C_OUT))
        conv3d_softmax_kernel[(triton.cdiv(M, TILE_M),)](
            x,
            self.conv.weight,
            self.conv.bias,
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
            KD=KD,
            KH=KH,
            KW=KW,
            BLOCK_M=TILE_M,
            BLOCK_N=BLOCK_N,
            BLOCK_K=TILE_K,
            num_warps=WARPS,
        )
        kd, kh, kw = self.pool_kernel_size
        # floor mode, twice: n -> n // k -> (n // k) // k
        PD, PH, PW = OD // kd // kd, OH // kh // kh, OW // kw // kw
        out = torch.empty((B, C_OUT, PD, PH, PW), device=x.device, dtype=x.dtype)
        N = out.numel()
        if N > 0:
            double_maxpool3d_kernel[(triton.cdiv(N, POOL_BLOCK),)](
                y,
                out,
                N,
                OD,
                OH,
                OW,
                PD,
                PH,
                PW,
                WD=kd * kd,
                WH=kh * kh,
                WW=kw * kw,
                BLOCK=POOL_BLOCK,
                num_warps=POOL_WARPS,
            )
        return out
