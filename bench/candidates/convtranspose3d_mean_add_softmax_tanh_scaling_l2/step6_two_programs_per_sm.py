"""ConvTranspose3d (stride 1), the mean over depth, a bias, softmax over the channels, tanh and a scale in two Triton
kernels, with the mean taken before the convolution (the mean over depth of a stride-1 transposed convolution is, per
depth tap kd, the (kh, kw) taps applied to the input summed over the depths that tap reaches), as step 5 (fp16
channels-last depth-tap sums in a zeroed frame, a K step one (kd, kh) pair of 64, TMA boxes fed to wgmma, a persistent
flat loop over tiles and taps with 4 stages, the fused softmax epilogue).

Follows the top advice on step 5: "Keep the tensor cores fed (two programs per SM, TMA, one wait per K step)". What
changed: tiles of 128 pixels (one TMA box, one accumulator) x all 64 output channels walked by two programs of 4 warps
a SM, so one program's softmax epilogue and stores run while the other's MMAs do (step 5: 256 pixels, two boxes and
accumulators, 8 warps, one program a SM, whose in-loop accumulator reset made ptxas serialize every wgmma); a K step
waits on its MMA once, keeping one group in flight. 168 registers with Triton 3.6, 115 KB shared a program, no
spills, no serialized wgmma."""

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
    x_ptr, s_ptr, D, W, HW, HP, WP, OD, C_IN: tl.constexpr, KS: tl.constexpr, KS_P2: tl.constexpr, PAD: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # one sample and BLOCK of its (h, w) pixels, all channels, read once along depth; written channels-last in fp16
    # (the tensor cores' operand) into the zeroed [HP, WP] frame at (h + KS - 1 - PAD, w + KS - 1 - PAD)
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
    at = (r // W + KS - 1 - PAD) * WP + r % W + KS - 1 - PAD
    dst = s_ptr + ((b * KS + kd[:, None, None]) * HP * WP + at[None, :, None]).to(tl.int64) * C_IN + c[None, None, :]
    tl.store(dst, tl.permute(acc, (0, 2, 1)).to(tl.float16), mask=(kd < KS)[:, None, None] & ok[None, :, None])


@triton.jit
def convt_mean_softmax_kernel(
    s_desc, w_desc, cb_ptr, bias_ptr, out_ptr, B, C_OUT, OD, OH, OW, SCALE,
    KS: tl.constexpr, TILE_H: tl.constexpr, TILE_W: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    STAGES: tl.constexpr, NUM_PROGS: tl.constexpr,
):
    BLOCK_M: tl.constexpr = TILE_H * TILE_W
    tiles_w = tl.cdiv(OW, TILE_W)
    tiles_h = tl.cdiv(OH, TILE_H)
    tiles = B * tiles_h * tiles_w
    steps: tl.constexpr = KS * KS  # a K step is one (kd, kh) pair: its kw taps x C_IN channels, BLOCK_K
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
        t = i % steps
        # stride 1: output o takes input o + PAD - k, at o + KS - 1 - k in the frame; along depth tap kd's input is
        # its sum over depth. Pixel (oh, ow)'s taps (kd, kh, all kw) are the KW_P2 frame pixels from
        # (oh + KS - 1 - kh, ow) on, kw = KS - 1 - j: element [b KS + kd, oh + KS - 1 - kh, ow, :] of s_desc
        a = s_desc.load([b * KS + t // KS, th * TILE_H + KS - 1 - t % KS, tw * TILE_W, 0])
        a = a.reshape(BLOCK_M, BLOCK_K)
        # the weight as [(kd, kh), j, C_IN, C_OUT]: the tile is BLOCK_K rows of contiguous output channels
        w = w_desc.load([t * BLOCK_K, 0])
        acc = tl.dot(a, w, acc)  # fp16 x fp16 into fp32 on the tensor cores
        if t == steps - 1:
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
        """The weight (C_in, C_out, kd, kh, kw) as [(kd, kh), j = KS - 1 - kw padded to a power of two, C_in, C_out
        padded to a power of two] in fp16 (zeros where padded), made once per weight version."""
        w = self.conv_transpose.weight
        key = (w._version, w.data_ptr(), w.device)
        if getattr(self, "_wk_key", None) != key:
            c_in, c_out, kd, kh, kw = w.shape
            wk = torch.zeros(
                (kd * kh, triton.next_power_of_2(kw), c_in, triton.next_power_of_2(c_out)),
                device=w.device, dtype=torch.float16,
            )
            taps = w.detach().flip(4).permute(2, 3, 4, 0, 1).reshape(kd * kh, kw, c_in, c_out)
            wk[:, :kw, :, :c_out] = taps
            self._wk = wk.reshape(-1, wk.shape[3])
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
        if C_IN not in (8, 16) or KS > 4 or C_OUT > 256 or not 0 <= PAD < KS:
            raise ValueError(
                f"this kernel takes 8 or 16 input channels, kernels of up to 4 taps, padding below the kernel size and "
                f"up to 256 output channels; got {C_IN}, {KS}, {PAD} and {C_OUT}"
            )
        # the sums in a zeroed frame: KS - 1 - PAD pixels before each row and column, and after them room for the
        # KW_P2 pixels a K step reads from the last output pixel on
        kw_p2 = triton.next_power_of_2(KS)
        HP, WP = OH + KS - 1, OW - 1 + kw_p2
        sums = torch.zeros((B, KS, HP, WP, C_IN), device=x.device, dtype=torch.float16)
        depth_tap_sums_kernel[(B, triton.cdiv(H * W, SUM_BLOCK))](
            x, sums, D, W, H * W, HP, WP, OD, C_IN=C_IN, KS=KS, KS_P2=triton.next_power_of_2(KS), PAD=PAD,
            BLOCK=SUM_BLOCK, num_warps=4,
        )
        out = torch.empty((B, C_OUT, 1, OH, OW), device=x.device, dtype=x.dtype)
        wk = self.weight_kn()
        block_k = kw_p2 * C_IN
        tile_w = min(TILE_M, triton.next_power_of_2(OW))
        tile_h = TILE_M // tile_w
        # element [b KS + kd, ph, pw, j C_IN + c] of this view is sums[b, kd, ph, pw + j, c] (its pixel axis strides
        # one pixel, so neighbouring rows overlap): a box of it is a tile's A operand for one (kd, kh)
        s_desc = TensorDescriptor(
            sums, [B * KS, HP, OW, block_k], [HP * WP * C_IN, WP * C_IN, C_IN, 1], [1, tile_h, tile_w, block_k],
        )
        w_desc = TensorDescriptor.from_tensor(wk, [block_k, wk.shape[1]])
        tiles = B * triton.cdiv(OH, tile_h) * triton.cdiv(OW, tile_w)
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
        progs = min(tiles, sms * PROGS_PER_SM)
        convt_mean_softmax_kernel[(progs,)](
            s_desc, w_desc, ct.bias, self.bias, out, B, C_OUT, OD, OH, OW, self.scaling_factor,
            KS=KS, TILE_H=tile_h, TILE_W=tile_w, BLOCK_N=wk.shape[1], BLOCK_K=block_k, STAGES=STAGES,
            NUM_PROGS=progs, num_warps=WARPS,
        )
        return out
