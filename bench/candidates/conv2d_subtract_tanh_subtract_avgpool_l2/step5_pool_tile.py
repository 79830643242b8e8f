"""Conv2d, tanh(x - s1) - s2 and a 2x2 average pool as one Triton kernel, as step 4 but with 256 x 128 tiles that
hold a pooled pixel's four conv outputs in one accumulator. Follows the top advice on step 4:
"Keep the tensor cores fed (TMA, deeper pipeline, bigger persistent tiles)"
What changed: a tile is 64 pooled pixels of one pooled row x all four pool offsets (256 rows) x 128 channels, so each
weight box feeds twice the rows and the pooled sum (step 4's second accumulator) is gone: a tap's input is one 5D TMA
box of the channels-last hi / lo input (the re-layout writes plain rows, not parity planes), ordered so that a
thread's wgmma rows are a pooled pixel's four outputs (the pool is a sum in registers). K 32 a step with 5 stages
(input boxes 3 loads ahead, weights 4; 221 KB shared; K 64 fits only 2 stages). 226 registers with Triton 3.6.
Everything else (bf16x3 parts made outside the loop, persistent loop over tiles x taps, fused tail) as in step 4.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

TILE_PW, TILE_N, TILE_K, WARPS, STAGES = 64, 128, 32, 8, 5  # 64 pooled pixels x 4 pool offsets = 256 rows
SPLIT_C, SPLIT_W = 64, 64  # the re-layout's block: 64 channels x 64 columns of one input row


@triton.jit
def tanh(x):
    # tanh from exp (Triton has no tanh of its own): e = exp(-2|x|) never overflows
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def split_kernel(x_ptr, hi_ptr, lo_ptr, C, H, W, BLOCK_C: tl.constexpr, BLOCK_W: tl.constexpr):
    # one (sample, input row) and a block of columns: read [C, W] along the NCHW rows (coalesced) and write each
    # pixel's channels contiguous (channels-last), as bf16 hi = x to 8 bits and lo = x - hi (hi + lo holds 16 bits)
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    rw = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    rc = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    ok = (rc < C)[:, None] & (rw < W)[None, :]
    x = tl.load(x_ptr + ((b * C + rc) * H + h).to(tl.int64)[:, None] * W + rw[None, :], mask=ok)
    hi = x.to(tl.bfloat16)
    lo = (x - hi.to(tl.float32)).to(tl.bfloat16)
    out = (bh.to(tl.int64) * W + rw)[None, :] * C + rc[:, None]
    tl.store(hi_ptr + out, hi, mask=ok)
    tl.store(lo_ptr + out, lo, mask=ok)


@triton.jit
def conv_tanh_pool_kernel(
    x_hi_desc,
    x_lo_desc,
    w_hi_desc,
    w_lo_desc,
    b_ptr,
    out_ptr,
    B,
    C_IN,
    C_OUT,
    H,
    PH,
    PW,
    S1,
    S2,
    KS: tl.constexpr,
    TILE_PW: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STAGES: tl.constexpr,
    NUM_PROGS: tl.constexpr,
):
    BLOCK_M: tl.constexpr = 4 * TILE_PW
    tiles_w = tl.cdiv(PW, TILE_PW)
    tiles_n = tl.cdiv(C_OUT, BLOCK_N)
    tiles = B * PH * tiles_w * tiles_n
    c_steps = C_IN // BLOCK_K
    tile_steps = KS * KS * c_steps
    pid = tl.program_id(0)
    my_tiles = tl.cdiv(tiles - pid, NUM_PROGS)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # One loop over this program's tiles x taps x channel blocks, so the pipeline keeps loads in flight into the next
    # tile while a tile's tail runs
    for i in tl.range(0, my_tiles * tile_steps, num_stages=STAGES):
        tile = pid + (i // tile_steps) * NUM_PROGS
        n0 = (tile % tiles_n) * BLOCK_N
        tile = tile // tiles_n
        pw0 = (tile % tiles_w) * TILE_PW
        tile = tile // tiles_w
        ph = tile % PH
        b = tile // PH
        step = i % tile_steps
        tap = step // c_steps
        kh = tap // KS
        kw = tap % KS
        c0 = (step % c_steps) * BLOCK_K
        # conv output (2 ph + dy, 2 pw + dx) reads input (2 ph + dy + kh, 2 pw + dx + kw): the box [dy, pw // 8, dx,
        # pw % 8, channels] from row b H + 2 ph + kh, column 2 pw0 + kw (the view's axes: rows, 16 columns, 1 column,
        # 2 columns, channels), so tile row (dy 128 + (pw // 8) 16 + dx 8 + pw % 8) sits in the same thread as its
        # pool partners in wgmma's accumulator layout (rows r, r + 8, r + 128, r + 136)
        box = [b * H + 2 * ph + kh, pw0 // 8, kw, 0, c0]
        # bf16x3: all four parts were made outside the loop (the input's by the re-layout, the weight's per version)
        a_hi = x_hi_desc.load(box).reshape(BLOCK_M, BLOCK_K)
        a_lo = x_lo_desc.load(box).reshape(BLOCK_M, BLOCK_K)
        w_hi = w_hi_desc.load([step * BLOCK_K, n0])
        w_lo = w_lo_desc.load([step * BLOCK_K, n0])
        acc = tl.dot(a_lo, w_hi, acc)  # the small terms first
        acc = tl.dot(a_hi, w_lo, acc)
        acc = tl.dot(a_hi, w_hi, acc)
        if step == tile_steps - 1:
            rn = n0 + tl.arange(0, BLOCK_N)
            n_ok = rn < C_OUT
            bias = tl.load(b_ptr + rn, mask=n_ok, other=0.0)
            v = tanh(acc + bias[None, :] - S1) - S2
            pooled = tl.sum(tl.sum(v.reshape(2, TILE_PW // 8, 2, 8, BLOCK_N), axis=2), axis=0)
            pooled = pooled.reshape(TILE_PW, BLOCK_N) * 0.25
            pw = pw0 + tl.arange(0, TILE_PW)
            out = out_ptr + (b * C_OUT * PH * PW + ph * PW + pw)[:, None] + rn[None, :] * PH * PW
            tl.store(out, pooled, mask=(pw < PW)[:, None] & n_ok[None, :])
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)


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
        if C_IN % TILE_K or self.pool != 2 or W % 16 or KS > 3 or C_OUT % 8:
            raise ValueError(
                f"this kernel takes input channels in steps of {TILE_K}, a 2x2 pool, a width in steps of 16, kernels "
                f"up to 3 and output channels in steps of 8; got {C_IN} channels, pool {self.pool}, width {W}, "
                f"kernel {KS}, {C_OUT} out"
            )
        # channels-last bf16 hi and lo, in one pass; one row more than the image's, since a box's last columns may
        # run up to 2 pixels past a row's end (into outputs that are dropped)
        x = x.contiguous()
        x_hi = torch.empty((B * H + 1, W, C_IN), device=x.device, dtype=torch.bfloat16)
        x_lo = torch.empty_like(x_hi)
        split_kernel[(B * H, triton.cdiv(W, SPLIT_W), triton.cdiv(C_IN, SPLIT_C))](
            x,
            x_hi,
            x_lo,
            C_IN,
            H,
            W,
            BLOCK_C=SPLIT_C,
            BLOCK_W=SPLIT_W,
            num_warps=4,
        )
        PH, PW = (H - KS + 1) // self.pool, (W - KS + 1) // self.pool
        out = torch.empty((B, C_OUT, PH, PW), device=x.device, dtype=x.dtype)
        # the input viewed [rows, 16-column groups, column offset (dx + kw < 4), 2-column steps, channels]
        x_hi_desc, x_lo_desc = (
            TensorDescriptor(
                xp,
                [B * H, W // 16, 4, 8, C_IN],
                [W * C_IN, 16 * C_IN, C_IN, 2 * C_IN, 1],
                [2, TILE_PW // 8, 2, 8, TILE_K],
            )
            for xp in (x_hi, x_lo)
        )
        block_n = min(TILE_N, triton.next_power_of_2(C_OUT))
        w_hi, w_lo = self.weight_parts()
        w_hi_desc = TensorDescriptor.from_tensor(w_hi, [TILE_K, block_n])
        w_lo_desc = TensorDescriptor.from_tensor(w_lo, [TILE_K, block_n])
        tiles = B * PH * triton.cdiv(PW, TILE_PW) * triton.cdiv(C_OUT, block_n)
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
        progs = min(tiles, sms)
        conv_tanh_pool_kernel[(progs,)](
            x_hi_desc,
            x_lo_desc,
            w_hi_desc,
            w_lo_desc,
            self.conv.bias,
            out,
            B,
            C_IN,
            C_OUT,
            H,
            PH,
            PW,
            self.subtract1_value,
            self.subtract2_value,
            KS=KS,
            TILE_PW=TILE_PW,
            BLOCK_N=block_n,
            BLOCK_K=TILE_K,
            STAGES=STAGES,
            NUM_PROGS=progs,
            num_warps=WARPS,
        )
        return out
