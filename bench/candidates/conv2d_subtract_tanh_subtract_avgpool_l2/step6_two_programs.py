"""Conv2d, tanh(x - s1) - s2 and a 2x2 average pool as one Triton kernel, as step 5 but with two programs per SM of
128 x 128 tiles and one wait per K step. Follows the top advice on step 5:
"Keep the tensor cores fed (two programs per SM, TMA, one wait per K step)"
What changed: a tile is 32 pooled pixels x the four pool offsets (128 rows; 256 before, which the advice warns
against at one program per SM) x 128 channels, with 4 warps and a persistent grid of 2 x the SM count, so one
program's tail runs while the other's wgmma do; the box order keeps a pooled pixel's four rows in one thread (rows r,
r + 8, r + 64, r + 72). Each loop step is one of bf16x3's three products (its parts picked by a TMA coordinate into
stacked hi / lo tensors) into one accumulator: no dot feeds another in a step, so Triton keeps each wgmma in flight
behind the next step's loads (step 5's chain waited after each product); a loop over the tiles around the pipelined
K loop, so the tail reads the accumulator after its wait (step 5's flat loop read it with wgmma in flight, and ptxas
serialized every wgmma). K 64 with 3 stages. Everything else as in step 5.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

TILE_PW, TILE_N, TILE_K, WARPS, STAGES, PROGS_PER_SM = 32, 128, 64, 4, 3, 2  # 32 pooled pixels x 4 offsets: 128 rows
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
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in tl.range(0, tile_steps, num_stages=STAGES):
            prod = step % 3  # lo x hi, hi x lo, hi x hi
            kstep = step // 3
            tap = kstep // c_steps
            kh = tap // KS
            kw = tap % KS
            c0 = (kstep % c_steps) * BLOCK_K
            # conv output (2 ph + dy, 2 pw + dx) reads input (2 ph + dy + kh, 2 pw + dx + kw): the box [dy, pw // 8,
            # dx, pw % 8, channels] from row b H + 2 ph + kh, column 2 pw0 + kw (the view's axes: rows, 16 columns,
            # 1 column, 2 columns, channels), so tile row (dy 64 + (pw // 8) 16 + dx 8 + pw % 8) sits in the same
            # thread as its pool partners in wgmma's accumulator layout (rows r, r + 8, r + 64, r + 72)
            # bf16x3: all four parts were made outside the loop (the input's by the re-layout, the weight's per
            # version); this step's product takes the input's lo (rows past the hi part's) first, then the weight's
            # lo, then both his
            box = [(prod == 0).to(tl.int32) * part_rows + b * H + 2 * ph + kh, pw0 // 8, kw, 0, c0]
            a = x_desc.load(box).reshape(BLOCK_M, BLOCK_K)
            w = w_desc.load([(prod == 1).to(tl.int32) * w_parts + kstep * BLOCK_K, n0])
            acc = tl.dot(a, w, acc)  # one product a step: the next step's dot needs no wait on this one
        rn = n0 + tl.arange(0, BLOCK_N)
        n_ok = rn < C_OUT
        bias = tl.load(b_ptr + rn, mask=n_ok, other=0.0)
        v = tanh(acc + bias[None, :] - S1) - S2
        pooled = tl.sum(tl.sum(v.reshape(2, TILE_PW // 8, 2, 8, BLOCK_N), axis=2), axis=0)
        pooled = pooled.reshape(TILE_PW, BLOCK_N) * 0.25
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
        if C_IN % TILE_K or self.pool != 2 or W % 16 or KS > 3 or C_OUT % 8:
            raise ValueError(
                f"this kernel takes input channels in steps of {TILE_K}, a 2x2 pool, a width in steps of 16, kernels "
                f"up to 3 and output channels in steps of 8; got {C_IN} channels, pool {self.pool}, width {W}, "
                f"kernel {KS}, {C_OUT} out"
            )
        # channels-last bf16 hi and lo, in one pass; one row more than the image's, since a box's last columns may
        # run up to 2 pixels past a row's end (into outputs that are dropped)
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
        # the input viewed [rows, 16-column groups, column offset (dx + kw < 4), 2-column steps, channels]
        x_desc = TensorDescriptor(
            x_parts,
            [2 * (B * H + 1), W // 16, 4, 8, C_IN],
            [W * C_IN, 16 * C_IN, C_IN, 2 * C_IN, 1],
            [2, TILE_PW // 8, 2, 8, TILE_K],
        )
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
