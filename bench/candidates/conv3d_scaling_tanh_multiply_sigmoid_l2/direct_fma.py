"""Conv3d, x scale, tanh, x bias and sigmoid in one Triton kernel: the convolution done directly on the FMA units in
exact fp32, as `direct_conv` advises for a convolution this small (81 multiply-adds an output pixel into 16 channels),
written from Conv3d_GroupNorm_Mean's eighth step (its rule's instance) for another problem.

A program takes BLOCK_P consecutive output voxels of one sample and every output channel; a tap (c, kd, kh, kw) is
one load of the input at the voxels' offsets plus the tap's constant offset, times the tap's weights of every
channel, in a loop over (c, kd, kh) with kw unrolled. The channels are R accumulators [8, BLOCK_P] (channel 8 r + g in
row g of accumulator r). The epilogue runs in registers and each row is stored along the voxels."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_P, WARPS = 128, 1
ROWS = 8  # channels a row block of the accumulators


@triton.jit
def _epilogue(acc, c, conv_bias_ptr, scale_ptr, bias_ptr):
    y = (acc + tl.load(conv_bias_ptr + c)[:, None]) * tl.load(scale_ptr + c)[:, None]
    y = 2.0 * tl.sigmoid(2.0 * y) - 1.0  # tanh
    return tl.sigmoid(y * tl.load(bias_ptr + c)[:, None])


@triton.jit
def conv3d_tanh_sigmoid_kernel(
    x_ptr,
    w_ptr,
    conv_bias_ptr,
    scale_ptr,
    bias_ptr,
    out_ptr,
    D,
    H,
    W,
    OH,
    OW,
    SPATIAL,
    C_IN: tl.constexpr,
    KS: tl.constexpr,
    R: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    b = tl.program_id(1)
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    p_ok = p < SPATIAL
    od = p // (OH * OW)
    oh = (p // OW) % OH
    ow = p % OW
    src = x_ptr + b.to(tl.int64) * C_IN * D * H * W + (od * H + oh) * W + ow
    g = tl.arange(0, ROWS)
    acc0 = tl.zeros((ROWS, BLOCK_P), dtype=tl.float32)
    acc1 = tl.zeros((ROWS, BLOCK_P), dtype=tl.float32)
    for ckh in range(C_IN * KS * KS):
        c = ckh // (KS * KS)
        kd = (ckh // KS) % KS
        kh = ckh % KS
        row = src + ((c * D + kd) * H + kh) * W
        for kw in tl.static_range(KS):
            xv = tl.load(row + kw, mask=p_ok, other=0.0)[None, :]
            # the tap's weights, laid out [tap, R, ROWS]: row block r holds channels 8 r + g
            w_tap = w_ptr + (ckh * KS + kw) * R * ROWS + g
            acc0 += tl.load(w_tap)[:, None] * xv
            if R > 1:
                acc1 += tl.load(w_tap + ROWS)[:, None] * xv
    dst = out_ptr + b.to(tl.int64) * R * ROWS * SPATIAL + g[:, None] * SPATIAL + p[None, :]
    ok = p_ok[None, :]
    tl.store(dst, _epilogue(acc0, g, conv_bias_ptr, scale_ptr, bias_ptr), mask=ok)
    if R > 1:
        y1 = _epilogue(acc1, ROWS + g, conv_bias_ptr, scale_ptr, bias_ptr)
        tl.store(dst + ROWS * SPATIAL, y1, mask=ok)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor, bias_shape):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.scaling_factor = nn.Parameter(torch.randn(bias_shape))
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def weight_taps(self) -> torch.Tensor:
        """conv.weight (C_out, C_in, kd, kh, kw) as [taps (c, kd, kh, kw), C_out]: a tap's weight of channel
        ROWS r + g at [tap, ROWS r + g]; made once per weight version and address."""
        w = self.conv.weight
        key = (w._version, w.data_ptr())
        if getattr(self, "_wk_key", None) != key:
            self._wk, self._wk_key = w.detach().reshape(w.shape[0], -1).T.contiguous(), key
        return self._wk

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.conv
        if conv.stride != (1, 1, 1) or conv.padding != (0, 0, 0) or conv.dilation != (1, 1, 1):
            raise ValueError("this kernel computes a stride-1, unpadded, undilated convolution")
        if conv.out_channels not in (ROWS, 2 * ROWS):
            raise ValueError(f"this kernel holds 8 or 16 output channels; got {conv.out_channels}")
        x = x.contiguous()
        B, C_IN, D, H, W = x.shape
        KS = conv.kernel_size[0]
        OD, OH, OW = D - KS + 1, H - KS + 1, W - KS + 1
        spatial = OD * OH * OW
        out = torch.empty((B, conv.out_channels, OD, OH, OW), device=x.device, dtype=x.dtype)
        conv3d_tanh_sigmoid_kernel[(triton.cdiv(spatial, BLOCK_P), B)](
            x,
            self.weight_taps(),
            conv.bias,
            self.scaling_factor,
            self.bias,
            out,
            D,
            H,
            W,
            OH,
            OW,
            spatial,
            C_IN=C_IN,
            KS=KS,
            R=conv.out_channels // ROWS,
            ROWS=ROWS,
            BLOCK_P=BLOCK_P,
            num_warps=WARPS,
        )
        return out
