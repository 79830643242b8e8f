"""Conv3d, GroupNorm and the mean of each sample in two Triton kernels: the tensor-core convolution of step 1 reduces
its own output to per-(sample, channel) sums and sums of squares, and a small kernel turns those into the means.

Follows the top advice on step 1: "Fold the 1 kernel(s) after the convolution into its epilogue". What changed: the
conv's epilogue sums each channel's values and squares over the tile's rows in registers and adds them with atomics
into a [B, 2, C_out] buffer, so the 243 MB conv output is never written; the grid walks tiles within one sample
(sample on its third axis) so a tile's rows all belong to one sample. The mean is linear in the normalized values:
per group, rstd x sum_c gamma_c (S_c - spatial x mean_g), plus spatial x sum beta, from those sums alone."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

TILE_M, TILE_N, TILE_K, WARPS, STAGES = 128, 32, 16, 8, 4


@triton.jit
def conv3d_stats_kernel(
    x_ptr, w_ptr, b_ptr, stats_ptr, C_IN, C_OUT, D, H, W, OD, OH, OW, K,
    KS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, N_PAD: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    b = tl.program_id(2)
    spatial = OD * OH * OW
    rs = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # voxels of sample b
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rs < spatial
    n_ok = rn < C_OUT
    # output voxel -> (od, oh, ow); stride 1, no padding: input (od + kd, oh + kh, ow + kw)
    ow = rs % OW
    oh = (rs // OW) % OH
    od = rs // (OW * OH)
    row = b * C_IN * D * H * W + od * H * W + oh * W + ow
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        ci = rk // (KS * KS * KS)
        tap = rk % (KS * KS * KS)
        col = ci * D * H * W + (tap // (KS * KS)) * H * W + ((tap // KS) % KS) * W + tap % KS
        # gathered as [BLOCK_K, BLOCK_M] so a warp's lanes walk consecutive voxels of a row (one contiguous stretch
        # of the input), not the taps; transposed in the registers
        a_t = tl.load(x_ptr + row[None, :] + col[:, None], mask=m_ok[None, :] & (rk[:, None] < K), other=0.0)
        a = tl.trans(a_t)
        # the [K, C_out] weight is padded with zeros to whole tiles: no mask
        w = tl.load(w_ptr + rk[:, None] * N_PAD + rn[None, :])
        acc = tl.dot(a, w, acc, input_precision="tf32x3")
    v = acc + tl.load(b_ptr + rn, mask=n_ok, other=0.0)[None, :]
    v = tl.where(m_ok[:, None], v, 0.0)  # rows past the sample's end hold the bias alone
    # this tile's share of each channel's sum and sum of squares; the conv output itself is never stored
    stats = stats_ptr + b * 2 * C_OUT + rn
    tl.atomic_add(stats, tl.sum(v, axis=0), mask=n_ok)
    tl.atomic_add(stats + C_OUT, tl.sum(v * v, axis=0), mask=n_ok)


@triton.jit
def groupnorm_mean_kernel(
    stats_ptr, gamma_ptr, beta_ptr, out_ptr, C, GROUPS, SPATIAL, eps,
    BLOCK_C: tl.constexpr, BLOCK_G: tl.constexpr,
):
    # one sample: GroupNorm's statistics from the channel sums, then the mean of the normalized values
    b = tl.program_id(0)
    c = tl.arange(0, BLOCK_C)
    c_ok = c < C
    s = tl.load(stats_ptr + b * 2 * C + c, mask=c_ok, other=0.0)
    q = tl.load(stats_ptr + b * 2 * C + C + c, mask=c_ok, other=0.0)
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

    def weight_k_by_cout(self) -> torch.Tensor:
        """conv.weight as [K, C_out] (K = C_in x taps, the kernel's order), zero-padded to whole tiles; made once per
        weight version and address, since it changes only when the weight does."""
        w = self.conv.weight
        key = (w._version, w.data_ptr())
        if getattr(self, "_wk_key", None) != key:
            c_out, k = w.shape[0], w[0].numel()
            wk = torch.zeros((triton.cdiv(k, TILE_K) * TILE_K, triton.cdiv(c_out, TILE_N) * TILE_N), device=w.device)
            wk.narrow(0, 0, k).narrow(1, 0, c_out).copy_(w.detach().reshape(c_out, k).t())
            self._wk, self._wk_key = wk, key
        return self._wk

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, C_IN, D, H, W = x.shape
        C_OUT, KS = self.conv.out_channels, self.conv.kernel_size[0]
        OD, OH, OW = D - KS + 1, H - KS + 1, W - KS + 1
        stats = torch.zeros((B, 2, C_OUT), device=x.device, dtype=torch.float32)
        wk = self.weight_k_by_cout()
        grid = (triton.cdiv(OD * OH * OW, TILE_M), triton.cdiv(C_OUT, TILE_N), B)
        conv3d_stats_kernel[grid](
            x, wk, self.conv.bias, stats, C_IN, C_OUT, D, H, W, OD, OH, OW, C_IN * KS * KS * KS,
            KS=KS, BLOCK_M=TILE_M, BLOCK_N=TILE_N, BLOCK_K=TILE_K, N_PAD=wk.shape[1], num_warps=WARPS,
            num_stages=STAGES,
        )
        out = torch.empty((B,), device=x.device, dtype=x.dtype)
        gn = self.group_norm
        groupnorm_mean_kernel[(B,)](
            stats, gn.weight, gn.bias, out, C_OUT, gn.num_groups, OD * OH * OW, gn.eps,
            BLOCK_C=triton.next_power_of_2(C_OUT), BLOCK_G=triton.next_power_of_2(gn.num_groups), num_warps=1,
        )
        return out
