"""Tensor cores: a GEMM or convolution on the FMA pipe while a faster path meets the tolerance (use them, on the
path measured to pass), and a tensor-core kernel whose tensor pipe is not kept fed. A Hopper tensor-core GEMM runs
one or two CTAs per SM with 168-255 registers by design, so its lever is feeding the tensor pipe, never occupancy.
"""

from __future__ import annotations

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.kinds import (
    busiest_tensor_pipe,
    few_channels_per_tap,
    is_fma_gemm,
    is_gather_fed_conv,
    is_latency_bound,
    is_tensor_gemm,
    multi_term,
)
from kforge_mcp.advice.rules.base import (
    DEVICE_KERNELS,
    RANKING,
    Rule,
    Wording,
    ev,
    hot_kernels,
    of_a_convolution,
    pct,
    recommendation,
)
from kforge_mcp.advice.rules.compute import COMPUTE, ComputeThresholds, limiting_unit
from kforge_mcp.advice.rules.fed import already_fed, fed_as_advised, few_channels
from kforge_mcp.advice.rules.serialized import serialized
from kforge_mcp.advice.rules.split import SPLIT_WITH_FEED, fed_by_copy, splits_in_loop
from kforge_mcp.judge.roofline import compute_paths, fastest, lookup_peaks
from kforge_mcp.platforms import device_arch
from kforge_mcp.profiling.report import ProfileReport, Recommendation


def best_path(report: ProfileReport):
    """The fastest feasible path for the problem (from the roofline, else fp32 at KernelBench's 1e-4)."""
    r = report.roofline
    peaks, _ = lookup_peaks((r.device if r else None) or report.device_name or report.device)
    paths = r.paths if r and r.paths else compute_paths(peaks, r.dtype if r else "fp32", None, None)
    feasible = [p for p in paths if p.feasible]
    fma = peaks.flops.get("fp32")
    return fastest(feasible), fma


def _mma(neutral: str, triton: str, cuda: str, cute: str, metal: str | None = None) -> Wording:
    targets = {"triton": triton, "cuda": cuda, "cute": cute}
    return Wording(neutral, targets | ({"metal": metal} if metal else {}))


_SPLIT_CUDA = (
    "in the kernel itself (no library call): split each fp32 tile as it is staged in shared memory into a {fmt} "
    "high part and the {fmt} rounding of the rest, and issue {n} {fmt} MMAs per k-step ({terms}) into one fp32 "
    "accumulator: mma.sync.aligned {shape} (WMMA {frag} fragments work too; wgmma.mma_async on sm_90a)"
)
_SPLIT_CUTE = (
    "split each fp32 tile into a {fmt} high part and the {fmt} rounding of the rest when staging it to shared "
    "memory, and issue {n} {fmt} MMA atoms per k-block ({terms}; SM90 GMMA atoms on sm_90a, SM80 {atom} before) "
    "into one fp32 accumulator"
)
_BF16 = {"fmt": "bf16", "shape": "m16n8k16 .bf16", "frag": "__nv_bfloat16", "atom": "SM80_16x8x16_F32BF16BF16F32_TN"}
_FP16 = {"fmt": "fp16", "shape": "m16n8k16 .f16", "frag": "half", "atom": "SM80_16x8x16_F32F16F16F32_TN"}
_THREE = {"n": "three", "terms": "lo_a hi_b + hi_a lo_b + hi_a hi_b"}
_TWO = {"n": "two", "terms": "lo_a b + hi_a b, the other operand rounded once"}

# How to do the products on each path the tolerance allows, per target
TENSOR_WORDING = {
    "bf16x3": _mma(
        "bf16x3 on fp32 tiles: split each tile into a bf16 high part and the bf16 rounding of the rest, and sum "
        "lo_a hi_b + hi_a lo_b + hi_a hi_b as three bf16 MMAs into one fp32 accumulator (twice 3xTF32's rate)",
        "bf16x3 on fp32 tiles: split each tile into bf16 hi = x.to(bf16) and lo = (x - hi).to(bf16) and sum "
        "tl.dot(lo_a, hi_b) + tl.dot(hi_a, lo_b) + tl.dot(hi_a, hi_b) into one fp32 accumulator (three bf16 MMAs per "
        "step, twice 3xTF32's rate; newer Triton has tl.dot(..., input_precision='bf16x3'))",
        "bf16x3, " + _SPLIT_CUDA.format(**_BF16, **_THREE),
        "bf16x3: " + _SPLIT_CUTE.format(**_BF16, **_THREE),
    ),
    "bf16x6": _mma(
        "bf16x6: each fp32 tile split into three bf16 parts, six bf16 MMAs per step (fp32-level accuracy)",
        "bf16x6: each fp32 tile split into three bf16 parts, six tl.dot bf16 MMAs per step (fp32-level accuracy; "
        "tl.dot(..., input_precision='bf16x6') in newer Triton)",
        "bf16x6: each fp32 tile split into three bf16 parts as it is staged, six mma.sync .bf16 per k-step into one "
        "fp32 accumulator, in the kernel itself",
        "bf16x6: each fp32 tile split into three bf16 parts as it is staged, six bf16 MMA atoms per k-block",
    ),
    "bf16x2": _mma(
        "bf16x2: split the operand the split helps most into bf16 hi + lo, round the other to bf16 once, and sum "
        "the two bf16 products into one fp32 accumulator",
        "bf16x2: split the operand the split helps most into bf16 hi + lo, round the other to bf16 once, "
        "and sum tl.dot(lo, b) + tl.dot(hi, b) (two bf16 MMAs per step)",
        "bf16x2, " + _SPLIT_CUDA.format(**_BF16, **_TWO),
        "bf16x2: " + _SPLIT_CUTE.format(**_BF16, **_TWO),
    ),
    "fp16x2": _mma(
        "fp16x2: split the operand the split helps most into fp16 hi + lo, round the other to fp16 once, and sum "
        "the two fp16 products into one fp32 accumulator",
        "fp16x2: split the operand the split helps most into fp16 hi + lo, round the other to fp16 once, "
        "and sum tl.dot(lo, b) + tl.dot(hi, b) (two fp16 MMAs per step)",
        "fp16x2, " + _SPLIT_CUDA.format(**_FP16, **_TWO),
        "fp16x2: " + _SPLIT_CUTE.format(**_FP16, **_TWO),
    ),
    "3xtf32": _mma(
        "3xTF32: split each fp32 operand into a TF32 big part and a TF32 small part and sum big big + big small + "
        "small big as three TF32 MMAs into an fp32 accumulator (fp32-level accuracy, passes 1e-4; single-pass TF32 "
        "does not at large K)",
        "tl.dot(a, b, acc, input_precision='tf32x3') on fp32 tiles (three TF32 MMAs per product: fp32-level "
        "accuracy, passes 1e-4; single-pass 'tf32' does not at large K)",
        "3xTF32 in the kernel itself (no library call): split each operand into big = wmma::__float_to_tf32(x) and "
        "small = wmma::__float_to_tf32(x - big) and issue three mma.sync.aligned.m16n8k8 .tf32 (or WMMA "
        "precision::tf32 fragments) per k-step, big big + big small + small big, into one fp32 accumulator "
        "(fp32-level accuracy; single-pass TF32 fails 1e-4 at large K)",
        "3xTF32: TF32 MMA atoms (SM90 GMMA ..._F32TF32TF32_SS on sm_90a, SM80_16x8x8_F32TF32TF32F32_TN before) with "
        "each operand split into big + small TF32 parts, three atoms per k-block into one fp32 accumulator",
    ),
    "tf32": _mma(
        "TF32 products with an fp32 accumulator (the tolerance allows TF32's 10-bit mantissa)",
        "tl.dot(a, b, acc, input_precision='tf32') (the tolerance allows TF32's 10-bit mantissa)",
        "mma.sync.aligned.m16n8k8 .tf32 or WMMA precision::tf32 fragments with an fp32 accumulator, in the kernel "
        "itself (the tolerance allows TF32's 10-bit mantissa)",
        "TF32 MMA atoms with an fp32 accumulator (the tolerance allows TF32's 10-bit mantissa)",
    ),
    "bf16": _mma(
        "bf16 tiles: cast them to bf16 and multiply on the tensor cores with an fp32 accumulator",
        "bf16 tiles: cast them to bf16 and tl.dot with an fp32 accumulator",
        "bf16 tiles: mma.sync .bf16 or WMMA __nv_bfloat16 fragments (wgmma.mma_async on sm_90a) with an fp32 "
        "accumulator, in the kernel itself",
        "bf16 tiles: bf16 MMA atoms with an fp32 accumulator",
        "bf16 tiles: simdgroup_multiply_accumulate on simdgroup_bfloat8x8 matrices with a float accumulator",
    ),
    "fp16": _mma(
        "fp16 tiles: cast them to fp16 and multiply on the tensor cores with an fp32 accumulator",
        "fp16 tiles: cast them to fp16 and tl.dot with an fp32 accumulator",
        "fp16 tiles: mma.sync .f16 or WMMA half fragments (wgmma.mma_async on sm_90a) with an fp32 accumulator, in "
        "the kernel itself",
        "fp16 tiles: fp16 MMA atoms with an fp32 accumulator",
        "fp16 tiles: simdgroup_multiply_accumulate on simdgroup_half8x8 matrices with a float accumulator",
    ),
    "fp8": _mma(
        "fp8 (e4m3) tiles with per-tensor scales and an fp32 accumulator",
        "fp8 (e4m3) tiles with per-tensor scales and an fp32 accumulator (tl.dot on float8e4nv)",
        "fp8 (e4m3) tiles with per-tensor scales: mma.sync .e4m3 (sm_89) or wgmma.mma_async (sm_90a) with an fp32 "
        "accumulator",
        "fp8 (e4m3) tiles with per-tensor scales: fp8 GMMA atoms with an fp32 accumulator",
    ),
}


CONV_IMPLICIT_GEMM = Wording(
    "The convolution runs on the FMA pipe. Do it as an implicit GEMM on the tensor cores: M = output pixels, N = "
    "output channels, K = input channels x kernel taps; per K step gather a pixels x K tile of the input (each K "
    "index a channel and a tap offset), and read the weight laid out once per weight version as [K x C_out] (cached "
    "on the parameter's _version), so its tile loads contiguous.",
    {
        "triton": "The convolution runs on the FMA pipe. Do it as an implicit GEMM on the tensor cores: M = output "
        "pixels, N = output channels, K = input channels x kernel taps; per K step gather a [BLOCK_M, BLOCK_K] tile "
        "of the input with tl.load on computed offsets (each K index a channel and a tap offset, masked at the "
        "borders), and read the weight laid out once per weight version as [K, C_out] (cached on the parameter's "
        "_version), so its [BLOCK_K, BLOCK_N] tile loads contiguous; tl.dot the two tiles.",
    },
)
SPLIT_REGISTERS = Wording(
    "Split each tile into its parts right before its products, so only one K step's parts are live, and keep the "
    "output tile at 64x64 to 128x64 per CTA: a split triples the operand registers (a 3xTF32 convolution with "
    "128x128 tiles ran at 255 registers and spilled 63% of its memory traffic).",
    {
        "triton": "Split each tile into its parts right before its tl.dot calls, so only one K step's parts are "
        "live, and keep BLOCK_M x BLOCK_N at 64x64 to 128x64 with num_warps=4-8: a split triples the operand "
        "registers (a 3xTF32 convolution with 128x128 tiles ran at 255 registers and spilled 63% of its memory "
        "traffic).",
    },
)


def tensor_action(path: str, target: str | None) -> str:
    wording = TENSOR_WORDING.get(path)
    return wording.say(target) if wording else path


def efficiency_range(path: str, t: ComputeThresholds = COMPUTE) -> tuple[float, float]:
    """The fraction of a path's peak a first kernel on it reaches: a range for multi-term paths."""
    return t.multi_term_efficiency if multi_term(path) else (t.tensor_efficiency, t.tensor_efficiency)


def efficiency_note(path: str, low: float, high: float, at_high: float) -> str:
    if low != high:
        return (
            f"A first {path} kernel reaches {low:.0%} to {high:.0%} of its path's peak depending on the compiler "
            "(measured: Triton 3xTF32 GEMMs reached 19-22% on an H200 with Triton 3.6, 44-52% on an H100): the "
            f"estimate takes the low end; at the high end it is {min(at_high, RANKING.max_gain):.2f}"
        )
    return f"A first tensor-core kernel reaches about {low:.0%} of its path's peak (measured: Triton bf16 GEMMs reached 39-44% on an H200)"


def _use_tensor_cores(report: ProfileReport, t: ComputeThresholds) -> list[Recommendation]:
    best, fma = best_path(report)
    if best is None or not fma or best.peak_flops <= fma * t.faster_path_factor:
        return []
    hits, gain, high, evidence, bases = [], 0.0, 0.0, [], set()
    r = report.roofline
    v = vocabulary.of(report)
    # the time the roofline's FLOPs are set against (measured outside the profiler), else the profile's own
    total_ms = (r.measured_ms if r is not None and r.measured_ms else None) or report.device_ms_per_forward or 0.0
    gemms = [(k, share) for k, share in hot_kernels(report) if is_fma_gemm(k)]
    gemm_share = sum(share for _, share in gemms)
    effs = efficiency_range(best.path, t)
    for k, share in gemms:
        hits.append(k.name)
        if r is not None and r.flops > 0 and total_ms > 0 and not is_latency_bound(k, v):
            # the problem's FLOPs (split by time among its GEMMs) at the faster path's peak x a first tensor-core
            # kernel's efficiency, on the SMs the grid can use, against the time the kernel takes now
            sms = report.sm_count or v.default_sm_count
            used = min(1.0, k.blocks / sms) if k.blocks and sms else 1.0  # all SMs where either is unknown
            k_ms = share * total_ms
            low_g, high_g = (
                share * max(0.0, 1 - r.flops * (share / gemm_share) / (best.peak_flops * eff * used) * 1e3 / k_ms)
                for eff in effs
            )
            gain, high = gain + low_g, high + high_g
            bases.add(f"1 - FLOPs / ({best.path} peak x {effs[0]:g}) / measured time")
            continue
        if k.fma_pipe_pct is not None:  # only the time the FMA pipe is busy shrinks (a latency-bound kernel waits)
            math_share, how = min(k.fma_pipe_pct / 100, 1.0), "FMA pipe busy fraction"
        else:
            math_share, how = t.unknown_math_share, "assumed half (no pipe metrics or FLOPs)"
        bases.add(f"{how} x (1 - FMA peak / {best.path} peak)")
        g = share * math_share * (1 - fma / best.peak_flops)
        gain, high = gain + g, high + g
    for k, _share in gemms:
        _, tensor = busiest_tensor_pipe(k, v)
        evidence += [
            ev("compute path", f"{k.compute_path} (told by {k.kind_basis})", "tensor cores", k.name),
            ev("tensor pipes busy", pct(tensor), "> 50% for a GEMM", k.name),
        ]
        if k.fma_pipe_pct is not None:
            evidence.append(ev("FMA pipe busy", pct(k.fma_pipe_pct), kernel=k.name))
    if not hits:
        return []
    evidence += [
        ev("fastest path within the tolerance", f"{best.path}: {best.peak_flops / 1e12:.4g} TFLOP/s", best.why),
        ev("FMA (fp32) peak", f"{fma / 1e12:.4g} TFLOP/s"),
    ]
    uncertain = gain < t.worth_gain <= high  # the efficiency range decides whether the change pays
    convs = all(k.category == "conv" for k in report.device_kernels() if k.name in hits)
    action = (
        f"{CONV_IMPLICIT_GEMM.say(report.target)} Use {tensor_action(best.path, report.target)}."
        + (f" {SPLIT_REGISTERS.say(report.target)}" if multi_term(best.path) else "")
        + " Keep the fused epilogue in registers after the products."
        if convs
        else f"The GEMM runs on the FMA pipe. Use {tensor_action(best.path, report.target)}. Keep the fused epilogue "
        "(bias, activation) in registers after the products."
    )
    if uncertain:
        action += (
            f" Uncertain: whether {best.path} beats this FMA kernel depends on how well the compiler lowers it; time "
            "both before committing to it."
        )
    return [
        recommendation(
            rule="use_tensor_cores",
            title=f"Do the matrix products on tensor cores ({best.path})",
            evidence=evidence,
            action=action,
            expected_gain=gain,
            expected_gain_high=high if effs[0] != effs[1] else None,
            gain_basis=f"time share x ({'; '.join(sorted(bases))}); {best.path} peak {best.peak_flops / 1e12:.4g} "
            f"TFLOP/s against the FMA pipe's {fma / 1e12:.4g}. {efficiency_note(best.path, *effs, high)}",
            kernels=hits,
            change=f"tensor cores ({best.path})",
            **({"priority": "low"} if uncertain else {}),
        )
    ]


use_tensor_cores = Rule("use_tensor_cores", _use_tensor_cores, COMPUTE, (DEVICE_KERNELS,))

FEED_WORDING = Wording(
    "The tensor pipe waits on data. Feed it: load tiles with the tensor memory accelerator (TMA) or asynchronous "
    "copies, pipeline deeper (3-5 stages) so loads overlap the MMAs, use larger tiles per CTA (128x256 or 256x128 "
    "with 8 warps, a K tile of 64), a persistent grid of one program per SM walking tiles in grouped order (L2 "
    "reuse, no tail wave), and warp specialization so producer warps load while consumer warps compute. Do not "
    "trade registers for occupancy: one or two CTAs per SM is the design.",
    {
        "triton": "The tensor pipe waits on data. Feed it: load tiles with TMA (tl.make_tensor_descriptor or a host "
        "TensorDescriptor), pipeline deeper (num_stages 3-5) so loads overlap the MMAs, use larger tiles per CTA "
        "(128x256 or 256x128 with num_warps=8, BLOCK_K 64), a persistent grid of one program per SM walking tiles in "
        "grouped order (L2 reuse, no tail wave), and warp specialization (tl.range(..., warp_specialize=True)) so "
        "producer warps load while consumer warps compute. Do not trade registers for occupancy: one or two CTAs per "
        "SM is the design.",
        "cuda": "The tensor pipe waits on data. Feed it: load tiles with TMA (cp.async.bulk.tensor on a CUtensorMap "
        "made on the host) or cp.async into a 3-5 stage shared-memory ring (cuda::pipeline) so loads overlap the "
        "MMAs, use larger tiles per CTA (128x256 with two consumer warpgroups on wgmma.mma_async), a persistent grid "
        "of one CTA per SM walking tiles in grouped order (L2 reuse, no tail wave), and a producer warp that only "
        "loads while the consumer warpgroups compute (setmaxnreg to shift registers to them). Do not trade registers "
        "for occupancy: one or two CTAs per SM is the design.",
        "cute": "The tensor pipe waits on data. Feed it: TMA copy atoms (SM90_TMA_LOAD) into a PipelineTmaAsync of "
        "3-5 stages so loads overlap the GMMAs, larger CTA tiles (128x256), a persistent tile scheduler with one CTA "
        "per SM in grouped order, and warp-specialized producer and consumer warpgroups. Do not trade registers for "
        "occupancy: one or two CTAs per SM is the design.",
    },
)
FEED_CONV_WORDING = Wording(
    "The tensor pipe of a convolution kernel idles for its epilogue, its stores and its waits on each MMA as much "
    "as for loads. Keep two programs per SM (tiles of 128 output pixels by 64-128 channels) so one program's "
    "epilogue and stores overlap the other's MMAs, operands by TMA with 3-4 stages, and for a multi-term path one "
    "accumulator for the small terms so each K step waits on the tensor cores once. Do not grow tiles to 256 rows "
    "at one program per SM: on the H100 conv trajectories that made three kernels 10-30% slower.",
    {
        "triton": "The tensor pipe of a convolution kernel idles for its epilogue, its stores and its waits on each "
        "MMA as much as for loads. Keep two programs per SM (BLOCK_M 128 output pixels by BLOCK_N 64-128 channels, "
        "num_warps 4, a persistent grid of 2 x the SM count) so one program's epilogue and stores overlap the "
        "other's tl.dot chain; operands by TMA descriptors with num_stages 3-4; on bf16x3, sum the two small "
        "products into an accumulator of their own so each K step waits on the tensor cores once. Do not grow tiles "
        "to 256 rows at one program per SM: on the H100 conv trajectories that made three kernels 10-30% slower "
        "(one with 128-row tiles ran 1.36 ms at one program per SM, 0.90 at two, 0.87 at four).",
    },
)
WGMMA_WORDING = Wording(
    "The MMAs run as mma.sync (hmma) on a Hopper part, which peaks well below its warpgroup MMAs (wgmma): use wgmma. ",
    {
        "triton": "The MMAs run as mma.sync (hmma) on a Hopper part, which peaks well below wgmma: use wgmma (Triton "
        "emits it for tl.dot with num_warps a multiple of 4 and BLOCK_M >= 64 on sm_90). ",
        "cuda": "The MMAs run as mma.sync (hmma) on a Hopper part, which peaks well below wgmma: issue "
        "wgmma.mma_async from a warpgroup of 4 warps with operands in shared memory (sm_90a). ",
        "cute": "The MMAs run as mma.sync (hmma) on a Hopper part, which peaks well below wgmma: use SM90 GMMA atoms "
        "(sm_90a) instead of the SM80 MMA atoms. ",
    },
)


def _feed_evidence(k, pipe: str | None, busy: float, t: ComputeThresholds) -> list:
    out = [
        ev(f"{pipe or 'tensor'} pipe busy", pct(busy) if pipe else None, f">= {t.fed_tensor_pct:g}%", k.name),
        ev("compute path", f"{k.compute_path} (told by {k.kind_basis})", kernel=k.name),
    ]
    if k.registers is not None:
        out.append(ev("registers per thread", k.registers, "168-255 is normal for a Hopper GEMM", k.name))
    if k.achieved_occupancy_pct is not None:
        out.append(ev("achieved occupancy", pct(k.achieved_occupancy_pct), "low is normal (1-2 CTAs/SM)", k.name))
    if k.top_stalls:
        s = k.top_stalls[0]
        out.append(ev(f"top stall: {s.reason}", s.cycles_per_issue, kernel=k.name))
    if k.waves_per_sm is not None:
        out.append(ev("waves per SM", round(k.waves_per_sm, 2), "many, or exactly 1 with a persistent grid", k.name))
    return out


def _feeds(k, v, r, frac: float | None, t: ComputeThresholds) -> bool:
    """A tensor-core kernel whose pipe waits on data, not one another rule speaks for."""
    if not is_tensor_gemm(k) or limiting_unit(k, v, frac, t) is not None or is_latency_bound(k, v):
        return False  # a latency-bound kernel's pipe idles for latency: latency_bound speaks for it
    if is_gather_fed_conv(k, v, bool(r and r.convs)):
        return False  # a convolution waiting on its own gathers: gather_fed_conv speaks for it
    if serialized(k, v):
        return False  # its MMAs wait on each other, which feeding does not relieve: mma_serialized speaks for it
    # fed by TMA already, a kernel whose pipe waits on the split in its loop is split_once's
    return not (splits_in_loop(k, v, r, bool(r and r.convs)) and fed_by_copy(k, v))


def _feed_tensor_pipe(report: ProfileReport, t: ComputeThresholds) -> list[Recommendation]:
    r = report.roofline
    v = vocabulary.of(report)
    hits, gain, evidence, paths, bases, shared = [], 0.0, [], set(), set(), []
    split_first = convs = False
    frac = r.fraction_of_sol if r is not None else None
    arch, followed, padded = device_arch(r.device) if r is not None else None, [], []
    mma_k = min(lookup_peaks(r.device)[0].mma_k.values(), default=None) if r is not None else None
    for k, share in hot_kernels(report):
        if not _feeds(k, v, r, frac, t):
            continue
        conv = of_a_convolution(k, report)
        if conv and fed_as_advised(k, v, arch):
            followed.append(k)  # the change is made: set apart, not asked again
            continue
        if conv and r is not None and few_channels_per_tap(r.convs, mma_k):
            padded.append(k)  # its pipe idles for padding and gathers: feeding does not pay
            continue
        split_first = split_first or splits_in_loop(k, v, r, bool(r and r.convs))
        pipe, busy = busiest_tensor_pipe(k, v)
        if pipe is not None and k.pipes and busy < t.limit_unit_pct:
            g = 1 - busy / t.fed_tensor_pct
            basis = f"share x (1 - tensor pipe {busy:.0f}% / {t.fed_tensor_pct:g}%)"
        elif frac is not None and (own := min(1.0, frac / share)) < t.limit_fraction:  # busy, far from its bound
            # the kernel's own fraction: the bound set against this kernel's time, not the whole forward's (time
            # in other kernels, e.g. a conversion pass, is theirs to win back)
            g = 1 - own / t.limit_fraction
            basis = f"share x (1 - the kernel's fraction of SOL (the forward's / its share) / {t.limit_fraction})"
        else:
            continue
        if k.top_stalls and k.top_stalls[0].reason in v.shared_stalls:
            g *= t.shared_bound_factor
            basis += f" x {t.shared_bound_factor:g} (the top stall, {k.top_stalls[0].reason}, is shared memory)"
        if conv:
            g *= t.conv_feed_factor
            basis += f" x {t.conv_feed_factor:g} (a convolution: measured on the H100 conv trajectories)"
            convs = True
        shared.append(k.top_stalls[0].reason in v.shared_stalls if k.top_stalls else False)
        gain += share * g
        bases.add(basis)
        hits.append(k.name)
        paths.add(k.compute_path or "")
        evidence += _feed_evidence(k, pipe, busy, t)
    if not hits:
        if padded and r is not None:
            return [few_channels(padded, v, min(c.c_in // max(1, c.groups) for c in r.convs), mma_k or 0)]
        return [already_fed(followed, v)] if followed else []
    action = (FEED_CONV_WORDING if convs else FEED_WORDING).say(report.target) + (
        SPLIT_WITH_FEED if split_first else ""
    )
    if any(p.startswith(v.superseded_mma_units) for p in paths):
        action = WGMMA_WORDING.say(report.target) + action
    if any("3xtf32" in (k.compute_path or "") for k, _ in hot_kernels(report)) or (r and r.path == "3xtf32"):
        action += " With 3xTF32 each product costs three MMAs, so its ceiling is a third of TF32's."
    shared_bound = all(shared)
    if convs:
        action += (
            " Uncertain on a convolution: on the H100 conv trajectories feeding changes realized -30% to +31% where "
            "the tensor pipe's idle share promised 6-68%; time the change against this kernel before keeping it."
        )
    if any(shared):
        action += (
            " Uncertain here: the MMAs wait on shared memory (short scoreboard / MIO), which deeper pipelines and "
            "TMA do not relieve; fewer shared-memory reads per MMA (bf16 operands, larger warp tiles) may."
        )
    if r and r.paths_measured and r.path in TENSOR_WORDING:  # the path measured to pass, which may beat the kernel's
        action += (
            f" The bound assumes {r.path_reason}; a kernel on a slower path cannot reach it: use "
            f"{tensor_action(r.path, report.target)}."
        )
    return [
        recommendation(
            rule="feed_tensor_pipe",
            title="Keep the tensor cores fed (two programs per SM, TMA, one wait per K step)"
            if convs
            else "Keep the tensor cores fed (TMA, deeper pipeline, bigger persistent tiles)",
            evidence=evidence,
            action=action,
            expected_gain=gain,
            gain_basis="; ".join(sorted(bases)) + ": time shrinks with the tensor pipe's busy fraction up to what "
            "cuBLAS reaches (measured: Triton bf16 GEMMs on an H200 realized 0.41-0.47 where this gave 0.49-0.50)",
            kernels=hits,
            change="feed the tensor pipe",
            **({"priority": "low"} if shared_bound or convs else {}),
        )
    ]


feed_tensor_pipe = Rule("feed_tensor_pipe", _feed_tensor_pipe, COMPUTE, (DEVICE_KERNELS,))
