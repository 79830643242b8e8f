"""ConvTranspose3d (stride 1), the mean over depth, a bias, softmax over the channels, tanh and a scale in two Triton
kernels, with the mean taken before the convolution (the mean over depth of a stride-1 transposed convolution is, per
depth tap kd, the (kh, kw) taps applied to the input summed over the depths that tap reaches), as step 3, with the
GEMM's tiles loaded by TMA in a persistent, flat pipelined loop.

Follows the top advice on step 3: "Keep the tensor cores fed (TMA, deeper pipeline, bigger persistent tiles)". What
changed: the depth-tap sums are written channels-last and in fp16 (the cast step 3 made in the GEMM's registers), so
a tap's tile of 128 pixels x 16 channels is one TMA box [1, 1, 1, 128, 16] whose rows past the image read zeros (the
transposed conv's border, no masks) and goes to wgmma straight from shared memory with the weight's [16, 64] box; one
program per SM walks the tiles (neighbours side by side, sharing halos in L2), taps and tiles as one loop with 4
stages in flight across tiles. 168 registers with Triton 3.6, no spills. The fused epilogue is step 3's."""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

TILE_M, WARPS, STAGES, SUM_BLOCK = 128, 4, 4, 64  # the columns are all the output channels (the softmax runs over them)
PROGS_PER_SM = 2


@triton.jit
def tanh(x):
    # tanh from exp (Triton has no tanh of its own): e = exp(-2|x|) never overflows
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def depth_tap_sums_kernel(
    x_ptr, s_ptr, D, HW, OD, C_IN: tl.constexpr, KS: tl.constexpr, KS_P2: tl.constexpr, PAD: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # one sample and BLOCK of its (h, w) pixels, all channels, read once along depth; written channels-last in fp16
    # (the tensor cores' operand), so a tap's tile of pixels x channels is one box
    b = tl.program_id(0)
    r = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    c = tl.arange(0, C_IN)
    ok = r < HW
    # output depth o takes input o + PAD - kd, so depth tap kd reaches inputs lo..hi over the OD outputs
    kd = tl.arange(0, KS_P2)
    lo = tl.maximum(PAD - kd, 0)
    hi = tl.minimum(OD - 1 + PAD - kd, D - 1)
    # [channels, pixels] tiles, pixels fastest: the loads are whole rows of x; one transpose, at the store
    src = x_ptr + (b * C_IN + c[:, None]).to(tl.int64) * D * HW + r[None, :]
    acc = tl.zeros((KS_P2, C_IN, BLOCK), dtype=tl.float32)
    for d in range(D):
        v = tl.load(src + d * HW, mask=ok[None, :], other=0.0)
        acc += tl.where(((d >= lo) & (d <= hi))[:, None, None], v[None, :, :], 0.0)
    dst = s_ptr + ((b * KS + kd[:, None, None]) * HW + r[None, :, None]).to(tl.int64) * C_IN + c[None, None, :]
    tl.store(dst, tl.permute(acc, (0, 2, 1)).to(tl.float16), mask=(kd < KS)[:, None, None] & ok[None, :, None])


@triton.jit
def convt_mean_softmax_kernel(
    s_desc, w_desc, cb_ptr, bias_ptr, out_ptr, B, C_OUT, OD, OH, OW, SCALE,
    KS: tl.constexpr, PAD: tl.constexpr, TILE_H: tl.constexpr, TILE_W: tl.constexpr, BLOCK_N: tl.constexpr,
    C_IN: tl.constexpr, STAGES: tl.constexpr, NUM_PROGS: tl.constexpr,
):
    BLOCK_M: tl.constexpr = TILE_H * TILE_W
    tiles_w = tl.cdiv(OW, TILE_W)
    tiles_h = tl.cdiv(OH, TILE_H)
    tiles = B * tiles_h * tiles_w
    steps: tl.constexpr = KS * KS * KS  # a K step is one (kd, kh, kw) tap: its C_IN channels
    pid = tl.program_id(0)
    my_tiles = tl.cdiv(tiles - pid, NUM_PROGS)
    rm = tl.arange(0, BLOCK_M)  # (oh, ow) of the tile, ow fastest: the box's row order
    rn = tl.arange(0, BLOCK_N)
    n_ok = rn < C_OUT
    cb = tl.load(cb_ptr + rn, mask=n_ok, other=0.0)
    bias = tl.load(bias_ptr + rn, mask=n_ok, other=0.0)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # One loop over this program's tiles x taps, so the pipeline keeps TMA loads in flight into the next tile while
    # a tile's softmax runs
    for i in tl.range(0, my_tiles * steps, num_stages=STAGES):
        tile = pid + (i // steps) * NUM_PROGS  # neighbouring programs take neighbouring boxes: halos shared in L2
        tw = tile % tiles_w
        th = (tile // tiles_w) % tiles_h
        b = tile // (tiles_w * tiles_h)
        tap = i % steps
        # stride 1: output o takes input o + PAD - k, and along depth tap kd's input is its sum over depth
        # (s_desc: [B, KS, H, W, C_IN]); the box's rows outside the image read zeros, the transposed conv's border
        a = s_desc.load([b, tap // (KS * KS), th * TILE_H + PAD - (tap // KS) % KS, tw * TILE_W + PAD - tap % KS, 0])
        a = a.reshape(BLOCK_M, C_IN)
        # the weight as [taps x C_IN, C_OUT]: the tile is C_IN rows of contiguous output channels
        w = w_desc.load([tap * C_IN, 0])
        acc = tl.dot(a, w, acc)  # fp16 x fp16 into fp32 on the tensor cores
        if tap == steps - 1:
            v = acc / OD + cb[None, :] + bias[None, :]
            v = tl.where(n_ok[None, :], v, float("-inf"))
            e = tl.exp(v - tl.max(v, axis=1)[:, None])
            p = e / tl.sum(e, axis=1)[:, None]
            oh = th * TILE_H + rm // TILE_W
            ow = tw * TILE_W + rm % TILE_W
            m_ok = (oh < OH) & (ow < OW)
            out = out_ptr + (b * C_OUT * OH * OW + oh * OW + ow)[:, None] + rn[None, :] * OH * OW
            tl.store(out, tanh(p) * SCALE, mask=m_ok[:, None] & n_ok[None, :])
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, scaling_factor):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.bias = nn.Parameter(torch.randn(1, out_channels, 1, 1, 1))
        self.scaling_factor = scaling_factor

    def weight_kn(self) -> torch.Tensor:
        """The weight (C_in, C_out, kd, kh, kw) as [27 taps x C_in, C_out padded to a power of two] in fp16, made once
        per weight version."""
        w = self.conv_transpose.weight
        key = (w._version, w.data_ptr(), w.device)
        if getattr(self, "_wk_key", None) != key:
            c_in, c_out = w.shape[:2]
            n_pad = triton.next_power_of_2(c_out)
            wk = torch.zeros((w[0, 0].numel(), c_in, n_pad), device=w.device, dtype=torch.float16)
            wk[:, :, :c_out] = w.detach().permute(2, 3, 4, 0, 1).reshape(-1, c_in, c_out)
            self._wk = wk.reshape(-1, wk.shape[2])
            self._wk_key = key
        return self._wk

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ct = self.conv_transpose
        if ct.stride != (1, 1, 1):
            raise ValueError(f"this kernel gathers a stride-1 transposed convolution; got stride {ct.stride}")
        x = x.contiguous()
        B, C_IN, D, H, W = x.shape
        C_OUT, KS, PAD = ct.out_channels, ct.kernel_size[0], ct.padding[0]
        OD, OH, OW = D + KS - 1 - 2 * PAD, H + KS - 1 - 2 * PAD, W + KS - 1 - 2 * PAD
        if C_IN not in (16, 32, 64) or C_OUT > 256:
            raise ValueError(
                f"this kernel takes 16, 32 or 64 input channels (one tap a K step) and up to 256 output channels; got "
                f"{C_IN} and {C_OUT}"
            )
        sums = torch.empty((B, KS, H, W, C_IN), device=x.device, dtype=torch.float16)
        depth_tap_sums_kernel[(B, triton.cdiv(H * W, SUM_BLOCK))](
            x, sums, D, H * W, OD, C_IN=C_IN, KS=KS, KS_P2=triton.next_power_of_2(KS), PAD=PAD, BLOCK=SUM_BLOCK,
            num_warps=4,
        )
        out = torch.empty((B, C_OUT, 1, OH, OW), device=x.device, dtype=x.dtype)
        wk = self.weight_kn()
        tile_w = min(TILE_M, triton.next_power_of_2(OW))
        tile_h = TILE_M // tile_w
        # tap (kd, kh, kw) of output pixel (oh, ow) reads sums[b, kd, oh + PAD - kh, ow + PAD - kw, :]: a box of
        # tile_h x tile_w pixels x C_IN channels (zeros past the image's edges)
        s_desc = TensorDescriptor.from_tensor(sums, [1, 1, tile_h, tile_w, C_IN])
        w_desc = TensorDescriptor.from_tensor(wk, [C_IN, wk.shape[1]])
        tiles = B * triton.cdiv(OH, tile_h) * triton.cdiv(OW, tile_w)
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
        progs = min(tiles, sms * PROGS_PER_SM)
        convt_mean_softmax_kernel[(progs,)](
            s_desc, w_desc, ct.bias, self.bias, out, B, C_OUT, OD, OH, OW, self.scaling_factor,
            KS=KS, PAD=PAD, TILE_H=tile_h, TILE_W=tile_w, BLOCK_N=wk.shape[1], C_IN=C_IN, STAGES=STAGES,
            NUM_PROGS=progs, num_warps=WARPS,
        )
        return out
