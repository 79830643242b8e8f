"""Conv2d, tanh(x - s1) - s2 and a 2x2 average pool as one Triton kernel, as step 6 (two programs per SM of 4 warps,
32 pooled pixels x 128 channels a tile, one bf16x3 product a K step, the tile loop around a pipelined K loop), repaired:
step 6 failed verify on the GPU (0.06% of outputs off by up to 0.11). Its input tile was one 5-D TMA box reshaped to
[128, K], which Triton 3.6 feeds to wgmma from registers, and it reloads those registers while three wgmma still read
them (triton-lang/triton#9433). Follows, as step 6 did, the top advice on step 5:
"Keep the tensor cores fed (two programs per SM, TMA, one wait per K step)"
What changed from step 6: the input is read as a 2-D TMA view [pixels, channels], and a step loads two boxes, one per
pool row dy, each 64 consecutive conv-output columns (32 pooled pixels x dx) of one input row; each goes to its own
dot and accumulator (64 rows each, independent within the step), so both operands come from shared memory. The tail
sums the two rows' tanh outputs and each column pair (rows 2 j, 2 j + 1) into the pooled pixel.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

TILE_PW, TILE_N, TILE_K, WARPS, STAGES, PROGS_PER_SM = 32, 128, 64, 4, 3, 2  # 32 pooled pixels: 2 boxes of 64 rows
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
    x_desc,
    w_desc,
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
    TILE_PW: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STAGES: tl.constexpr,
    NUM_PROGS: tl.constexpr,
):
    BLOCK_M: tl.constexpr = 2 * TILE_PW  # a pool row's conv outputs: TILE_PW pooled pixels x dx
    tiles_w = tl.cdiv(PW, TILE_PW)
    tiles_n = tl.cdiv(C_OUT, BLOCK_N)
    tiles = B * PH * tiles_w * tiles_n
    c_steps = C_IN // BLOCK_K
    tap_steps = KS * KS * c_steps
    tile_steps = 3 * tap_steps  # bf16x3: a step per product
    part_rows = B * H + 1  # the input's lo rows follow its hi rows
    w_parts = KS * KS * C_IN  # and the weight's
    # A loop over this program's tiles around a pipelined loop over one tile's products x taps x channel blocks: the
    # wait after the inner loop comes before the tail reads the accumulator (in one flat loop the tail read it while
    # its wgmma were in flight, and ptxas serialized every wgmma); the other program on the SM keeps the tensor cores
    # busy through this one's tail and pipeline refill
    for tile in range(tl.program_id(0), tiles, NUM_PROGS):
        n0 = (tile % tiles_n) * BLOCK_N
        rest = tile // tiles_n
        pw0 = (rest % tiles_w) * TILE_PW
        rest = rest // tiles_w
        ph = rest % PH
        b = rest // PH
        top = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # pool row dy = 0: conv row 2 ph
        bottom = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # dy = 1
        for step in tl.range(0, tile_steps, num_stages=STAGES):
            prod = step % 3  # lo x hi, hi x lo, hi x hi
            kstep = step // 3
            tap = kstep // c_steps
            kh = tap // KS
            kw = tap % KS
            c0 = (kstep % c_steps) * BLOCK_K
            # conv output (2 ph + dy, 2 pw0 + m) reads input (2 ph + dy + kh, 2 pw0 + m + kw): for each dy, the
            # BLOCK_M pixels from column 2 pw0 + kw of input row b H + 2 ph + dy + kh, one box of the [pixels,
            # channels] view; this step's product takes the input's lo (the rows past the hi part's) first, then the
            # weight's lo, then both his
            row = ((prod == 0).to(tl.int32) * part_rows + b * H + 2 * ph + kh) * W + 2 * pw0 + kw
            w = w_desc.load([(prod == 1).to(tl.int32) * w_parts + kstep * BLOCK_K, n0])
            top = tl.dot(x_desc.load([row, c0]), w, top)
            bottom = tl.dot(x_desc.load([row + W, c0]), w, bottom)
        rn = n0 + tl.arange(0, BLOCK_N)
        n_ok = rn < C_OUT
        bias = tl.load(b_ptr + rn, mask=n_ok, other=0.0)
        v = (tanh(top + bias[None, :] - S1) - S2) + (tanh(bottom + bias[None, :] - S1) - S2)
        pooled = tl.sum(v.reshape(TILE_PW, 2, BLOCK_N), axis=1) * 0.25  # rows 2 j and 2 j + 1: dx 0 and 1
        pw = pw0 + tl.arange(0, TILE_PW)
        out = out_ptr + (b * C_OUT * PH * PW + ph * PW + pw)[:, None] + rn[None, :] * PH * PW
        tl.store(out, pooled, mask=(pw < PW)[:, None] & n_ok[None, :])


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, subtract1_value, subtract2_value, kernel_size_pool):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.subtract1_value = subtract1_value
        self.subtract2_value = subtract2_value
        self.pool = kernel_size_pool

    def weight_parts(self) -> torch.Tensor:
        """conv.weight (C_out, C_in, kh, kw) as [K, C_out] with K = (kh, kw, C_in), the kernel's order, split into
        bf16 hi and lo stacked as [2 K, C_out]; made once per weight version and address, since they change only when
        the weight does."""
        w = self.conv.weight
        key = (w._version, w.data_ptr())
        if getattr(self, "_wk_key", None) != key:
            wk = w.detach().permute(2, 3, 1, 0).reshape(-1, w.shape[0]).contiguous()
            hi = wk.to(torch.bfloat16)
            self._wk = torch.cat([hi, (wk - hi.float()).to(torch.bfloat16)])
            self._wk_key = key
        return self._wk

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C_IN, H, W = x.shape
        C_OUT, KS = self.conv.out_channels, self.conv.kernel_size[0]
        if C_IN % TILE_K or self.pool != 2 or KS > 3 or C_OUT % 8:
            raise ValueError(
                f"this kernel takes input channels in steps of {TILE_K}, a 2x2 pool, kernels up to 3 and output "
                f"channels in steps of 8; got {C_IN} channels, pool {self.pool}, kernel {KS}, {C_OUT} out"
            )
        # channels-last bf16 hi and lo, in one pass; one row more than the image's, since a box's last pixels may
        # run up to KS - 1 past a row's end (into outputs that are dropped)
        x = x.contiguous()
        # (hi and lo stacked: lo's rows follow hi's)
        x_parts = torch.empty((2, B * H + 1, W, C_IN), device=x.device, dtype=torch.bfloat16)
        x_hi, x_lo = x_parts[0], x_parts[1]
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
        # the input as [pixels, channels] (hi's, then lo's): a box is 2 TILE_PW consecutive pixels of one row
        x_desc = TensorDescriptor.from_tensor(x_parts.view(-1, C_IN), [2 * TILE_PW, TILE_K])
        block_n = min(TILE_N, triton.next_power_of_2(C_OUT))
        w_desc = TensorDescriptor.from_tensor(self.weight_parts(), [TILE_K, block_n])
        tiles = B * PH * triton.cdiv(PW, TILE_PW) * triton.cdiv(C_OUT, block_n)
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
        progs = min(tiles, PROGS_PER_SM * sms)  # two programs per SM: one's tail runs while the other's wgmma do
        conv_tanh_pool_kernel[(progs,)](
            x_desc,
            w_desc,
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
            TILE_PW=TILE_PW,
            BLOCK_N=block_n,
            BLOCK_K=TILE_K,
            STAGES=STAGES,
            NUM_PROGS=progs,
            num_warps=WARPS,
        )
        return out
