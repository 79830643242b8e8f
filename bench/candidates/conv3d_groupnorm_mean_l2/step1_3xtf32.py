"""Conv3d, GroupNorm and the mean of each sample in two Triton kernels, as step 0 but the convolution's products on the
tensor cores.

Follows the top advice on step 0: "Do the matrix products on tensor cores (3xtf32)". What changed: the implicit GEMM's
tl.dot takes input_precision="tf32x3" (each fp32 tile split into big and small TF32 parts, three TF32 MMAs a step)
instead of "ieee" on the FMA pipe; the weight is laid out once per weight version as [K, C_out] (K = C_in x 27 taps),
zero-padded to whole tiles, so its [BLOCK_K, BLOCK_N] tile loads contiguous and unmasked; 128x32 tiles (N = 24
channels), 16 of K a step, 8 warps, 4 stages (128 registers with Triton 3.9, 99 with 3.6, no spills, wgmma for sm_90a).
The bias add and the GroupNorm-mean kernel are as before."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

TILE_M, TILE_N, TILE_K, WARPS, STAGES = 128, 32, 16, 8, 4


@triton.jit
def conv3d_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, M, C_IN, C_OUT, D, H, W, OD, OH, OW, K,
    KS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, N_PAD: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # output voxel -> (sample, od, oh, ow); stride 1, no padding: input (od + kd, oh + kh, ow + kw)
    ow = rm % OW
    oh = (rm // OW) % OH
    od = (rm // (OW * OH)) % OD
    b = rm // (OW * OH * OD)
    row = b * C_IN * D * H * W + od * H * W + oh * W + ow
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        ci = rk // (KS * KS * KS)
        tap = rk % (KS * KS * KS)
        col = ci * D * H * W + (tap // (KS * KS)) * H * W + ((tap // KS) % KS) * W + tap % KS
        # gathered as [BLOCK_K, BLOCK_M] so a warp's lanes walk consecutive voxels of a row (one contiguous stretch
        # of the input), not the taps; transposed in the registers
        a_t = tl.load(x_ptr + row[None, :] + col[:, None], mask=(rm[None, :] < M) & (rk[:, None] < K), other=0.0)
        a = tl.trans(a_t)
        # the [K, C_out] weight is padded with zeros to whole tiles: no mask
        w = tl.load(w_ptr + rk[:, None] * N_PAD + rn[None, :])
        acc = tl.dot(a, w, acc, input_precision="tf32x3")
    acc += tl.load(b_ptr + rn, mask=rn < C_OUT, other=0.0)[None, :]
    spatial = OD * OH * OW
    out = y_ptr + (b * C_OUT * spatial + od * OH * OW + oh * OW + ow)[:, None] + rn[None, :] * spatial
    tl.store(out, acc, mask=(rm[:, None] < M) & (rn[None, :] < C_OUT))


@triton.jit
def groupnorm_mean_kernel(
    y_ptr, gamma_ptr, beta_ptr, out_ptr, C, GROUPS, SPATIAL, eps, BLOCK: tl.constexpr,
):
    b = tl.program_id(0)
    cpg = C // GROUPS
    n = cpg * SPATIAL  # a group's channels are contiguous: one stretch of cpg x SPATIAL values
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for g in range(GROUPS):
        base = y_ptr + (b * C + g * cpg) * SPATIAL
        s = tl.zeros((BLOCK,), dtype=tl.float32)
        for i in range(0, n, BLOCK):
            r = i + tl.arange(0, BLOCK)
            s += tl.load(base + r, mask=r < n, other=0.0)
        mean = tl.sum(s) / n
        ss = tl.zeros((BLOCK,), dtype=tl.float32)
        for i in range(0, n, BLOCK):
            r = i + tl.arange(0, BLOCK)
            d = tl.where(r < n, tl.load(base + r, mask=r < n, other=0.0) - mean, 0.0)
            ss += d * d
        rstd = 1.0 / tl.sqrt(tl.sum(ss) / n + eps)
        for i in range(0, n, BLOCK):
            r = i + tl.arange(0, BLOCK)
            c = g * cpg + r // SPATIAL
            v = tl.load(base + r, mask=r < n, other=0.0)
            gamma = tl.load(gamma_ptr + c, mask=r < n, other=0.0)
            beta = tl.load(beta_ptr + c, mask=r < n, other=0.0)
            total += tl.where(r < n, (v - mean) * rstd * gamma + beta, 0.0)
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
        y = torch.empty((B, C_OUT, OD, OH, OW), device=x.device, dtype=x.dtype)
        M = B * OD * OH * OW
        wk = self.weight_k_by_cout()
        grid = (triton.cdiv(M, TILE_M), triton.cdiv(C_OUT, TILE_N))
        conv3d_kernel[grid](
            x, wk, self.conv.bias, y, M, C_IN, C_OUT, D, H, W, OD, OH, OW, C_IN * KS * KS * KS,
            KS=KS, BLOCK_M=TILE_M, BLOCK_N=TILE_N, BLOCK_K=TILE_K, N_PAD=wk.shape[1], num_warps=WARPS,
            num_stages=STAGES,
        )
        out = torch.empty((B,), device=x.device, dtype=x.dtype)
        gn = self.group_norm
        groupnorm_mean_kernel[(B,)](
            y, gn.weight, gn.bias, out, C_OUT, gn.num_groups, OD * OH * OW, gn.eps, BLOCK=1024, num_warps=4,
        )
        return out
