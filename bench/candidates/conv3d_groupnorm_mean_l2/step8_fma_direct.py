"""Conv3d, GroupNorm and the mean of each sample in two Triton kernels: a direct convolution on the FMA units that
reduces its own output to per-(sample, channel) sums and sums of squares without the bias, and step 7's finisher.

Follows the top advice on step 7: "Compute the small convolution directly on the FMA units". What changed: the
convolution no longer runs on the tensor cores (no channels-last copy, no tf32 split, no TMA boxes, no persistent
programs). It runs in exact fp32 on the FMA units, straight from the NCDHW input. A program takes BLOCK_P consecutive
output voxels of one sample and every output channel. A tap (c, kd, kh, kw) is one load of the input at the voxels'
offsets plus the tap's constant offset, times the tap's weights of every channel. The channels are held as CPG
accumulators [GROUPS, BLOCK_P] (channel g CPG + r in row g of accumulator r). The loop runs over (c, kd, kh) with kw
unrolled; 128 voxels a program of one warp (a sweep on an H200: 0.37 ms; 0.42-0.62 ms at 256-1024 voxels, 1-8 warps,
or with all 27 taps of a channel unrolled)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_P, WARPS = 128, 1


@triton.jit
def conv3d_fma_stats_kernel(
    x_ptr,
    w_ptr,
    stats_ptr,
    C_OUT,
    D,
    H,
    W,
    OH,
    OW,
    SPATIAL,
    C_IN: tl.constexpr,
    KS: tl.constexpr,
    GROUPS: tl.constexpr,
    CPG: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    b = tl.program_id(1)
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    p_ok = p < SPATIAL
    od = p // (OH * OW)
    oh = (p // OW) % OH
    ow = p % OW
    src = x_ptr + b.to(tl.int64) * C_IN * D * H * W + (od * H + oh) * W + ow
    g = tl.arange(0, GROUPS)
    acc0 = tl.zeros((GROUPS, BLOCK_P), dtype=tl.float32)
    acc1 = tl.zeros((GROUPS, BLOCK_P), dtype=tl.float32)
    acc2 = tl.zeros((GROUPS, BLOCK_P), dtype=tl.float32)
    acc3 = tl.zeros((GROUPS, BLOCK_P), dtype=tl.float32)
    # a loop over (c, kd, kh) with its KS kw taps unrolled: unrolling all C_IN KS^3 taps overflows the instruction
    # cache (stalls on no instruction were the kernel's top stall)
    for ckh in range(C_IN * KS * KS):
        c = ckh // (KS * KS)
        kd = (ckh // KS) % KS
        kh = ckh % KS
        row = src + ((c * D + kd) * H + kh) * W
        for kw in tl.static_range(KS):
            xv = tl.load(row + kw, mask=p_ok, other=0.0)[None, :]
            # the tap's weights, laid out [tap, CPG, GROUPS]: row r holds channels g CPG + r
            w_tap = w_ptr + (ckh * KS + kw) * CPG * GROUPS + g
            acc0 += tl.load(w_tap)[:, None] * xv
            if CPG > 1:
                acc1 += tl.load(w_tap + GROUPS)[:, None] * xv
            if CPG > 2:
                acc2 += tl.load(w_tap + 2 * GROUPS)[:, None] * xv
            if CPG > 3:
                acc3 += tl.load(w_tap + 3 * GROUPS)[:, None] * xv
    # voxels past the sample were loaded as zeros and hold zero in every accumulator: no mask needed in the sums
    stats = stats_ptr + b * 2 * C_OUT + g * CPG
    tl.atomic_add(stats + 0, tl.sum(acc0, axis=1))
    tl.atomic_add(stats + C_OUT + 0, tl.sum(acc0 * acc0, axis=1))
    if CPG > 1:
        tl.atomic_add(stats + 1, tl.sum(acc1, axis=1))
        tl.atomic_add(stats + C_OUT + 1, tl.sum(acc1 * acc1, axis=1))
    if CPG > 2:
        tl.atomic_add(stats + 2, tl.sum(acc2, axis=1))
        tl.atomic_add(stats + C_OUT + 2, tl.sum(acc2 * acc2, axis=1))
    if CPG > 3:
        tl.atomic_add(stats + 3, tl.sum(acc3, axis=1))
        tl.atomic_add(stats + C_OUT + 3, tl.sum(acc3 * acc3, axis=1))


@triton.jit
def groupnorm_mean_kernel(
    stats_ptr,
    bias_ptr,
    gamma_ptr,
    beta_ptr,
    out_ptr,
    C,
    GROUPS,
    SPATIAL,
    eps,
    BLOCK_C: tl.constexpr,
    BLOCK_G: tl.constexpr,
):
    # one sample: GroupNorm's statistics from the channel sums, then the mean of the normalized values
    b = tl.program_id(0)
    c = tl.arange(0, BLOCK_C)
    c_ok = c < C
    s0 = tl.load(stats_ptr + b * 2 * C + c, mask=c_ok, other=0.0)
    q0 = tl.load(stats_ptr + b * 2 * C + C + c, mask=c_ok, other=0.0)
    bias = tl.load(bias_ptr + c, mask=c_ok, other=0.0)
    # the convolution summed y without its bias: over a channel's SPATIAL voxels, sum(y + b) = s0 + SPATIAL b and
    # sum((y + b)^2) = q0 + b (2 s0 + SPATIAL b)
    s = s0 + SPATIAL * bias
    q = q0 + bias * (2.0 * s0 + SPATIAL * bias)
    gamma = tl.load(gamma_ptr + c, mask=c_ok, other=0.0)
    beta = tl.load(beta_ptr + c, mask=c_ok, other=0.0)
    cpg = C // GROUPS
    n = (cpg * SPATIAL).to(tl.float32)
    member = (tl.arange(0, BLOCK_G)[:, None] == c[None, :] // cpg) & c_ok[None, :]  # [group, channel]
    mean_g = tl.sum(tl.where(member, s[None, :], 0.0), axis=1) / n
    var_g = tl.sum(tl.where(member, q[None, :], 0.0), axis=1) / n - mean_g * mean_g
    rstd_g = 1.0 / tl.sqrt(var_g + eps)
    mean_c = tl.sum(tl.where(member, mean_g[:, None], 0.0), axis=0)
    rstd_c = tl.sum(tl.where(member, rstd_g[:, None], 0.0), axis=0)
    # sum over a channel's voxels of (y - mean) rstd gamma + beta
    total = tl.where(c_ok, (s - SPATIAL * mean_c) * rstd_c * gamma + SPATIAL * beta, 0.0)
    tl.store(out_ptr + b, tl.sum(total) / (C * SPATIAL))


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)

    def weight_taps(self) -> torch.Tensor:
        """conv.weight (C_out, C_in, kd, kh, kw) as [taps (c, kd, kh, kw), CPG, GROUPS]: a tap's weights of channel
        g CPG + r at [tap, r, g]; made once per weight version and address."""
        w = self.conv.weight
        key = (w._version, w.data_ptr())
        if getattr(self, "_wk_key", None) != key:
            groups = self.group_norm.num_groups
            c_out = w.shape[0]
            taps = w.detach().reshape(groups, c_out // groups, -1).permute(2, 1, 0).contiguous()
            self._wk, self._wk_key = taps, key
        return self._wk

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv, gn = self.conv, self.group_norm
        if conv.stride != (1, 1, 1) or conv.padding != (0, 0, 0) or conv.dilation != (1, 1, 1):
            raise ValueError("this kernel computes a stride-1, unpadded, undilated convolution")
        cpg = conv.out_channels // gn.num_groups
        if cpg > 4 or gn.num_groups & (gn.num_groups - 1):
            raise ValueError(
                f"this kernel holds up to 4 channels a group in a power-of-two number of groups; got {cpg} channels"
                f" in {gn.num_groups} groups"
            )
        x = x.contiguous()
        B, C_IN, D, H, W = x.shape
        C_OUT, KS = conv.out_channels, conv.kernel_size[0]
        OD, OH, OW = D - KS + 1, H - KS + 1, W - KS + 1
        spatial = OD * OH * OW
        stats = torch.zeros((B, 2, C_OUT), device=x.device, dtype=torch.float32)
        conv3d_fma_stats_kernel[(triton.cdiv(spatial, BLOCK_P), B)](
            x,
            self.weight_taps(),
            stats,
            C_OUT,
            D,
            H,
            W,
            OH,
            OW,
            spatial,
            C_IN=C_IN,
            KS=KS,
            GROUPS=gn.num_groups,
            CPG=cpg,
            BLOCK_P=BLOCK_P,
            num_warps=WARPS,
        )
        out = torch.empty((B,), device=x.device, dtype=x.dtype)
        groupnorm_mean_kernel[(B,)](
            stats,
            conv.bias,
            gn.weight,
            gn.bias,
            out,
            C_OUT,
            gn.num_groups,
            spatial,
            gn.eps,
            BLOCK_C=triton.next_power_of_2(C_OUT),
            BLOCK_G=triton.next_power_of_2(gn.num_groups),
            num_warps=1,
        )
        return out
