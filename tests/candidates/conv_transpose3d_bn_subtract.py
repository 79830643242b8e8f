"""An exact fp32 kernel for ConvTranspose3d + training-mode BatchNorm3d + subtracting the spatial mean: every product
in fp32 on the FMA pipe. Subtracting each (sample, channel)'s spatial mean cancels the conv bias, the batch mean and
BatchNorm's shift, so out = (y - mean_s(y)) * weight / sqrt(var + eps), with the batch variance of y."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv_transpose3d_kernel(
    x_ptr, w_ptr, y_ptr, C_IN, C_OUT, ID, IH, IW, OD, OH, OW,
    K: tl.constexpr, STRIDE: tl.constexpr, PAD: tl.constexpr, BLOCK: tl.constexpr,
):
    pid_nc = tl.program_id(0)
    n, co = pid_nc // C_OUT, pid_nc % C_OUT
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < OD * OH * OW
    od, oh, ow = offs // (OH * OW), (offs // OW) % OH, offs % OW
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for ci in range(C_IN):
        for kd in tl.static_range(K):
            td = od + PAD - kd
            idd = td // STRIDE
            vd = (td >= 0) & (td % STRIDE == 0) & (idd < ID)
            for kh in tl.static_range(K):
                th = oh + PAD - kh
                ih = th // STRIDE
                vh = (th >= 0) & (th % STRIDE == 0) & (ih < IH)
                for kw in tl.static_range(K):
                    tw = ow + PAD - kw
                    iw = tw // STRIDE
                    ok = mask & vd & vh & (tw >= 0) & (tw % STRIDE == 0) & (iw < IW)
                    xv = tl.load(x_ptr + (((n * C_IN + ci) * ID + idd) * IH + ih) * IW + iw, mask=ok, other=0.0)
                    acc += xv * tl.load(w_ptr + (((ci * C_OUT + co) * K + kd) * K + kh) * K + kw)
    tl.store(y_ptr + pid_nc * OD * OH * OW + offs, acc, mask=mask)


@triton.jit
def spatial_mean_kernel(y_ptr, m_ptr, S, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, S, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(y_ptr + row * S + offs, mask=offs < S, other=0.0)
    tl.store(m_ptr + row, tl.sum(acc, axis=0) / S)


@triton.jit
def batch_stats_kernel(
    y_ptr, m_ptr, b_ptr, var_ptr, rmean_ptr, rvar_ptr, tracked_ptr, N, C, S, momentum, BLOCK: tl.constexpr,
):
    c = tl.program_id(0)
    mean = 0.0
    for n in range(N):
        mean += tl.load(m_ptr + n * C + c)
    mean = mean / N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for n in range(N):
        for start in range(0, S, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            v = tl.load(y_ptr + (n * C + c) * S + offs, mask=offs < S, other=0.0)
            d = tl.where(offs < S, v - mean, 0.0)
            acc += d * d
    count = N * S
    var = tl.sum(acc, axis=0) / count
    tl.store(var_ptr + c, var)
    # the running statistics BatchNorm keeps: the mean includes the conv bias, which the output cancels
    bias = tl.load(b_ptr + c)
    tl.store(rmean_ptr + c, (1.0 - momentum) * tl.load(rmean_ptr + c) + momentum * (mean + bias))
    tl.store(rvar_ptr + c, (1.0 - momentum) * tl.load(rvar_ptr + c) + momentum * var * count / (count - 1))
    if c == 0:
        tl.store(tracked_ptr, tl.load(tracked_ptr) + 1)


@triton.jit
def normalize_kernel(y_ptr, m_ptr, var_ptr, g_ptr, out_ptr, C, S, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = row % C
    scale = tl.load(g_ptr + c) / tl.sqrt(tl.load(var_ptr + c) + eps)
    mean = tl.load(m_ptr + row)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(y_ptr + row * S + offs, mask=offs < S, other=0.0)
    tl.store(out_ptr + row * S + offs, (v - mean) * scale, mask=offs < S)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias=True):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias
        )
        self.batch_norm = nn.BatchNorm3d(out_channels)

    def forward(self, x):
        conv, bn = self.conv_transpose, self.batch_norm
        n, c_in, d, h, w = x.shape
        k, s, p = conv.kernel_size[0], conv.stride[0], conv.padding[0]
        c = conv.out_channels
        od, oh, ow = (d - 1) * s - 2 * p + k, (h - 1) * s - 2 * p + k, (w - 1) * s - 2 * p + k
        size = od * oh * ow
        y = torch.empty(n, c, od, oh, ow, device=x.device, dtype=x.dtype)
        block = 128
        conv_transpose3d_kernel[(n * c, triton.cdiv(size, block))](
            x.contiguous(), conv.weight, y, c_in, c, d, h, w, od, oh, ow, K=k, STRIDE=s, PAD=p, BLOCK=block
        )
        means = torch.empty(n * c, device=x.device, dtype=x.dtype)
        spatial_mean_kernel[(n * c,)](y, means, size, BLOCK=1024)
        var = torch.empty(c, device=x.device, dtype=x.dtype)
        bias = conv.bias if conv.bias is not None else torch.zeros(c, device=x.device, dtype=x.dtype)
        batch_stats_kernel[(c,)](
            y, means, bias, var, bn.running_mean, bn.running_var, bn.num_batches_tracked, n, c, size, bn.momentum,
            BLOCK=1024,
        )
        out = torch.empty_like(y)
        normalize_kernel[(n * c, triton.cdiv(size, 1024))](y, means, var, bn.weight, out, c, size, bn.eps, BLOCK=1024)
        return out
