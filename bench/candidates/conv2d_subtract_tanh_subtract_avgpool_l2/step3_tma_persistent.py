"""Conv2d, tanh(x - s1) - s2 and a 2x2 average pool as one Triton kernel, as step 2 but its tiles loaded by TMA in a
persistent, flat pipelined loop. Follows the top advice on step 2:
"Keep the tensor cores fed (TMA, deeper pipeline, bigger persistent tiles)"
What changed: a tile is TILE_H x TILE_W pooled pixels of one image (128 rows) by 64 output channels; each A tile is
one TMA box of the channels-last input viewed [B H / 2, 2, W / 2, 2, C_in] (a pool offset and tap pick the box's
start, stride 2 in both axes), the weight split once per version into bf16 hi and lo [K, C_out] TMA'd straight into
wgmma; one program per SM walks the tiles (channel blocks fastest, sharing the box in L2), its pool passes and taps
as one loop, K 64 a step, 3 stages in flight across passes and tiles (200 registers with Triton 3.6, no spills; 128
channels a tile spill: accumulator and pooled sum; warp specialization is Blackwell-only in Triton 3.6). The
bf16x3 sum and fused tail are as in step 2.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

TILE_M, TILE_N, TILE_K, WARPS, STAGES = 128, 64, 64, 8, 3


@triton.jit
def tanh(x):
    # tanh from exp (Triton has no tanh of its own): e = exp(-2|x|) never overflows
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def conv_tanh_pool_kernel(
    x_desc, w_hi_desc, w_lo_desc, b_ptr, out_ptr, B, C_IN, C_OUT, H, PH, PW, S1, S2,
    KS: tl.constexpr, POOL: tl.constexpr, TILE_H: tl.constexpr, TILE_W: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, STAGES: tl.constexpr, NUM_PROGS: tl.constexpr,
):
    BLOCK_M: tl.constexpr = TILE_H * TILE_W
    tiles_h = tl.cdiv(PH, TILE_H)
    tiles_w = tl.cdiv(PW, TILE_W)
    tiles_n = tl.cdiv(C_OUT, BLOCK_N)
    tiles = B * tiles_h * tiles_w * tiles_n
    c_steps = C_IN // BLOCK_K
    pass_steps = KS * KS * c_steps  # K steps of one pool offset's convolution
    tile_steps = POOL * POOL * pass_steps
    pid = tl.program_id(0)
    my_tiles = tl.cdiv(tiles - pid, NUM_PROGS)
    rm = tl.arange(0, BLOCK_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    pooled = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # One loop over this program's tiles x pool offsets x taps x channel blocks, so the pipeline keeps loads in flight
    # across passes and into the next tile while a pass's tail runs
    for i in tl.range(0, my_tiles * tile_steps, num_stages=STAGES):
        tile = pid + (i // tile_steps) * NUM_PROGS
        n0 = (tile % tiles_n) * BLOCK_N  # the output channel block fastest: a box's programs run side by side
        tile = tile // tiles_n
        tw = tile % tiles_w
        th = (tile // tiles_w) % tiles_h
        b = tile // (tiles_w * tiles_h)
        step = i % tile_steps
        d = step // pass_steps  # pool offset (dy, dx)
        kk = step % pass_steps  # K step: tap (kh, kw), channel block
        tap = kk // c_steps
        eh = d // POOL + tap // KS  # input row 2 ph + eh, column 2 pw + ew (POOL = 2: the view's split axes)
        ew = d % POOL + tap % KS
        a = x_desc.load([b * (H // 2) + th * TILE_H + eh // 2, eh % 2, tw * TILE_W + ew // 2, ew % 2,
                         (kk % c_steps) * BLOCK_K])
        a = a.reshape(BLOCK_M, BLOCK_K)
        w_hi = w_hi_desc.load([kk * BLOCK_K, n0])
        w_lo = w_lo_desc.load([kk * BLOCK_K, n0])
        # bf16x3: the input tile's hi and lo made here (the weight's were made once per version)
        a_hi = a.to(tl.bfloat16)
        a_lo = (a - a_hi.to(tl.float32)).to(tl.bfloat16)
        acc = tl.dot(a_lo, w_hi, acc)  # the small terms first
        acc = tl.dot(a_hi, w_lo, acc)
        acc = tl.dot(a_hi, w_hi, acc)
        if kk == pass_steps - 1:
            rn = n0 + tl.arange(0, BLOCK_N)
            n_ok = rn < C_OUT
            bias = tl.load(b_ptr + rn, mask=n_ok, other=0.0)
            pooled += tanh(acc + bias[None, :] - S1) - S2
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            if d == POOL * POOL - 1:
                ph = th * TILE_H + rm // TILE_W
                pw = tw * TILE_W + rm % TILE_W
                m_ok = (ph < PH) & (pw < PW)
                out = out_ptr + (b * C_OUT * PH * PW + ph * PW + pw)[:, None] + rn[None, :] * PH * PW
                tl.store(out, pooled * (1.0 / (POOL * POOL)), mask=m_ok[:, None] & n_ok[None, :])
                pooled = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, subtract1_value, subtract2_value, kernel_size_pool):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.subtract1_value = subtract1_value
        self.subtract2_value = subtract2_value
        self.pool = kernel_size_pool

    def weight_parts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """conv.weight (C_out, C_in, kh, kw) as [K, C_out] with K = (kh, kw, C_in), the kernel's order, split into
        bf16 hi and lo; made once per weight version and address, since they change only when the weight does."""
        w = self.conv.weight
        key = (w._version, w.data_ptr())
        if getattr(self, "_wk_key", None) != key:
            wk = w.detach().permute(2, 3, 1, 0).reshape(-1, w.shape[0]).contiguous()
            hi = wk.to(torch.bfloat16)
            self._wk = (hi, (wk - hi.float()).to(torch.bfloat16))
            self._wk_key = key
        return self._wk

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C_IN, H, W = x.shape
        C_OUT, KS = self.conv.out_channels, self.conv.kernel_size[0]
        if C_IN % TILE_K or self.pool != 2 or H % 2 or W % 2 or C_OUT % 8:
            raise ValueError(
                f"this kernel takes input channels in steps of {TILE_K}, a 2x2 pool, an even height and width and "
                f"output channels in steps of 8; got {C_IN} channels, pool {self.pool}, {H}x{W}, {C_OUT} out"
            )
        # channels-last, in one pass: a pixel's channels contiguous, so a tap's tile is a plain block
        x_cl = x.permute(0, 2, 3, 1).contiguous()
        PH, PW = (H - KS + 1) // self.pool, (W - KS + 1) // self.pool
        out = torch.empty((B, C_OUT, PH, PW), device=x.device, dtype=x.dtype)
        # pooled pixel (ph, pw)'s input (2 ph + eh, 2 pw + ew) is element [b H / 2 + ph + eh // 2, eh % 2,
        # pw + ew // 2, ew % 2, c] of this view: a box of it is a tile of pooled pixels at one pool offset and tap
        tile_w = min(TILE_M, triton.next_power_of_2(PW))
        tile_h = TILE_M // tile_w
        x_desc = TensorDescriptor(
            x_cl, [B * H // 2, 2, W // 2, 2, C_IN], [2 * W * C_IN, W * C_IN, 2 * C_IN, C_IN, 1],
            [tile_h, 1, tile_w, 1, TILE_K],
        )
        block_n = min(TILE_N, triton.next_power_of_2(C_OUT))
        w_hi, w_lo = self.weight_parts()
        w_hi_desc = TensorDescriptor.from_tensor(w_hi, [TILE_K, block_n])
        w_lo_desc = TensorDescriptor.from_tensor(w_lo, [TILE_K, block_n])
        tiles = B * triton.cdiv(PH, tile_h) * triton.cdiv(PW, tile_w) * triton.cdiv(C_OUT, block_n)
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
        progs = min(tiles, sms)
        conv_tanh_pool_kernel[(progs,)](
            x_desc, w_hi_desc, w_lo_desc, self.conv.bias, out, B, C_IN, C_OUT, H, PH, PW,
            self.subtract1_value, self.subtract2_value,
            KS=KS, POOL=self.pool, TILE_H=tile_h, TILE_W=tile_w, BLOCK_N=block_n, BLOCK_K=TILE_K, STAGES=STAGES,
            NUM_PROGS=progs, num_warps=WARPS,
        )
        return out
