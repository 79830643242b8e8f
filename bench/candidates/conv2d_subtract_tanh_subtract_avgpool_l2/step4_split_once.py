"""Conv2d, tanh(x - s1) - s2 and a 2x2 average pool as one Triton kernel, as step 3 but with both operands split into
their bf16x3 parts once, outside the K loop. Follows the top advice on step 3:
"Split the operands into their bf16x3 parts once, outside the K loop"
What changed: a Triton re-layout kernel replaces the torch permute: it reads the NCHW input along its rows and writes
it channels-last as bf16 hi and lo (the same bytes as the fp32 input), each image split into its four (row, column)
parity planes, so that a pool offset's tap is one 2D TMA box of 128 pooled pixels; the convolution TMA's a_hi, a_lo,
w_hi and w_lo straight into the three wgmma (no conversion, no register round trip in the loop). With the input's
tile out of the registers a tile takes 128 output channels (step 3's spilled there): each box is loaded once per tile
and a wgmma of n 128 reads fewer shared bytes per product (240 registers, 200 KB shared with Triton 3.6, no spills).
Everything else (persistent loop over tiles x pool offsets x taps, 3 stages, fused tail) as in step 3.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

TILE_M, TILE_N, TILE_K, WARPS, STAGES = 128, 128, 64, 8, 3
SPLIT_C, SPLIT_W = 64, 64  # the re-layout's block: 64 channels x 64 columns of one input row


@triton.jit
def tanh(x):
    # tanh from exp (Triton has no tanh of its own): e = exp(-2|x|) never overflows
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def split_planes_kernel(x_ptr, hi_ptr, lo_ptr, C, H, W, BLOCK_C: tl.constexpr, BLOCK_W: tl.constexpr):
    # one (sample, input row) and a block of columns: read [C, W] along the NCHW rows (coalesced) and write each
    # pixel's channels contiguous, as bf16 hi = x to 8 bits and lo = x - hi (hi + lo holds 16 bits of x), pixel
    # (h, w) at [b, h % 2, w % 2, h // 2, w // 2, :]
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    rw = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    rc = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    ok = (rc < C)[:, None] & (rw < W)[None, :]
    x = tl.load(x_ptr + ((b * C + rc) * H + h).to(tl.int64)[:, None] * W + rw[None, :], mask=ok)
    hi = x.to(tl.bfloat16)
    lo = (x - hi.to(tl.float32)).to(tl.bfloat16)
    plane = (b * 4 + (h % 2) * 2 + rw % 2) * (H // 2) + h // 2
    out = (plane.to(tl.int64) * (W // 2) + rw // 2)[None, :] * C + rc[:, None]
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
    W,
    PH,
    PW,
    S1,
    S2,
    KS: tl.constexpr,
    POOL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STAGES: tl.constexpr,
    NUM_PROGS: tl.constexpr,
):
    QW = W // 2  # a parity plane's width
    plane = (H // 2) * QW
    # rows m = ph QW + pw of the pooled grid, QW wide (columns from PW on are computed and dropped)
    tiles_m = tl.cdiv(PH * QW, BLOCK_M)
    tiles_n = tl.cdiv(C_OUT, BLOCK_N)
    tiles = B * tiles_m * tiles_n
    c_steps = C_IN // BLOCK_K
    pass_steps = KS * KS * c_steps  # K steps of one pool offset's convolution
    tile_steps = POOL * POOL * pass_steps
    pid = tl.program_id(0)
    my_tiles = tl.cdiv(tiles - pid, NUM_PROGS)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    pooled = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # One loop over this program's tiles x pool offsets x taps x channel blocks, so the pipeline keeps loads in flight
    # across passes and into the next tile while a pass's tail runs
    for i in tl.range(0, my_tiles * tile_steps, num_stages=STAGES):
        tile = pid + (i // tile_steps) * NUM_PROGS
        n0 = (tile % tiles_n) * BLOCK_N  # the output channel block fastest: a box's programs run side by side
        tile = tile // tiles_n
        m0 = (tile % tiles_m) * BLOCK_M
        b = tile // tiles_m
        step = i % tile_steps
        d = step // pass_steps  # pool offset (dy, dx)
        kk = step % pass_steps  # K step: tap (kh, kw), channel block
        tap = kk // c_steps
        eh = d // POOL + tap // KS  # pooled pixel (ph, pw) reads input (2 ph + eh, 2 pw + ew) (POOL = 2)
        ew = d % POOL + tap % KS
        # ... which is row m + (eh // 2) QW + ew // 2 of parity plane (eh % 2, ew % 2): the tile is one box (rows
        # past the plane's end fall only to pooled pixels that are dropped)
        row = (b * 4 + (eh % 2) * 2 + ew % 2) * plane + m0 + (eh // 2) * QW + ew // 2
        # bf16x3: all four parts were made outside the loop (the input's by the re-layout, the weight's per version)
        a_hi = x_hi_desc.load([row, (kk % c_steps) * BLOCK_K])
        a_lo = x_lo_desc.load([row, (kk % c_steps) * BLOCK_K])
        w_hi = w_hi_desc.load([kk * BLOCK_K, n0])
        w_lo = w_lo_desc.load([kk * BLOCK_K, n0])
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
                rm = m0 + tl.arange(0, BLOCK_M)
                ph = rm // QW
                pw = rm % QW
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
        # channels-last bf16 hi and lo in parity planes, in one pass: a tap's tile of pooled pixels is a plain block
        x = x.contiguous()
        x_hi = torch.empty((B * 4 * (H // 2) * (W // 2), C_IN), device=x.device, dtype=torch.bfloat16)
        x_lo = torch.empty_like(x_hi)
        split_planes_kernel[(B * H, triton.cdiv(W, SPLIT_W), triton.cdiv(C_IN, SPLIT_C))](
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
        x_hi_desc = TensorDescriptor.from_tensor(x_hi, [TILE_M, TILE_K])
        x_lo_desc = TensorDescriptor.from_tensor(x_lo, [TILE_M, TILE_K])
        block_n = min(TILE_N, triton.next_power_of_2(C_OUT))
        w_hi, w_lo = self.weight_parts()
        w_hi_desc = TensorDescriptor.from_tensor(w_hi, [TILE_K, block_n])
        w_lo_desc = TensorDescriptor.from_tensor(w_lo, [TILE_K, block_n])
        tiles = B * triton.cdiv(PH * (W // 2), TILE_M) * triton.cdiv(C_OUT, block_n)
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
            W,
            PH,
            PW,
            self.subtract1_value,
            self.subtract2_value,
            KS=KS,
            POOL=self.pool,
            BLOCK_M=TILE_M,
            BLOCK_N=block_n,
            BLOCK_K=TILE_K,
            STAGES=STAGES,
            NUM_PROGS=progs,
            num_warps=WARPS,
        )
        return out
