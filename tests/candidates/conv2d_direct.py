"""An exact fp32 direct convolution: every product in fp32, summed in fp32."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv2d_kernel(x_ptr, w_ptr, b_ptr, y_ptr, C_IN, H, W, C_OUT, OH, OW, K: tl.constexpr, BLOCK: tl.constexpr):
    pid_nc = tl.program_id(0)
    n, co = pid_nc // C_OUT, pid_nc % C_OUT
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < OH * OW
    oh, ow = offs // OW, offs % OW
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for ci in range(C_IN):
        for kh in tl.static_range(K):
            for kw in tl.static_range(K):
                xv = tl.load(x_ptr + ((n * C_IN + ci) * H + oh + kh) * W + ow + kw, mask=mask, other=0.0)
                acc += xv * tl.load(w_ptr + ((co * C_IN + ci) * K + kh) * K + kw)
    acc += tl.load(b_ptr + co)
    tl.store(y_ptr + pid_nc * OH * OW + offs, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        n, c, h, w = x.shape
        k = self.conv.kernel_size[0]
        co = self.conv.out_channels
        y = torch.empty(n, co, h - k + 1, w - k + 1, device=x.device, dtype=x.dtype)
        block = 64
        grid = (n * co, triton.cdiv(y.shape[2] * y.shape[3], block))
        conv2d_kernel[grid](
            x.contiguous(), self.conv.weight, self.conv.bias, y, c, h, w, co, y.shape[2], y.shape[3], K=k, BLOCK=block
        )
        return y
