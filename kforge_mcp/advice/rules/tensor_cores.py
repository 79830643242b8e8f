"""Tensor cores: a GEMM or convolution on the FMA pipe while a faster path meets the tolerance (use them, on the
path measured to pass), and the wording each path's products take. Feeding a tensor-core kernel is fed.py's: a
Hopper tensor-core GEMM runs one or two CTAs per SM with 168-255 registers by design, so its lever is feeding the
tensor pipe, never occupancy.
"""

from __future__ import annotations

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.kinds import (
    busiest_tensor_pipe,
    is_fma_gemm,
    is_latency_bound,
    multi_term,
)
from kforge_mcp.advice.rules.base import (
    DEVICE_KERNELS,
    RANKING,
    Rule,
    Wording,
    ev,
    hot_kernels,
    pct,
    recommendation,
)
from kforge_mcp.advice.rules.compute import COMPUTE, ComputeThresholds
from kforge_mcp.advice.rules.direct_conv import DIRECT_CONV, small_convs
from kforge_mcp.core.schemas import ComputePath
from kforge_mcp.judge.roofline import compute_paths, fastest, lookup_peaks
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


SMALL_CONV_NOTE = (
    "A small convolution's tensor-core kernel is priced at {eff:.0%} of 3xTF32's peak whatever its path: the best "
    "3xTF32 kernel of Conv3d_GroupNorm_Mean (81 multiply-adds a pixel into 24 channels) reached that after seven "
    "steps on an H200, its time going to shaping the operands (gathers padded to the MMA's K and N, staging) more than "
    "to the MMAs, which a faster path does not shorten"
)


def _pricing(
    report: ProfileReport, best: ComputePath, t: ComputeThresholds
) -> tuple[tuple[float, float], float, str, bool]:
    """The range of a rate's fraction a first kernel reaches, the rate (a path's peak), its name, and whether the
    problem's convolutions are small: their tensor-core kernels are priced at a fraction of 3xTF32's peak on any
    path, as measured (direct_conv.py)."""
    r = report.roofline
    if r is None or not small_convs(report):
        return efficiency_range(best.path, t), best.peak_flops, best.path, False
    peaks, _ = lookup_peaks(r.device)
    split = next((p.peak_flops for p in compute_paths(peaks, "fp32", None, None) if p.path == "3xtf32"), None)
    rate, name = (split, "3xtf32") if split and split < best.peak_flops else (best.peak_flops, best.path)
    return (DIRECT_CONV.tensor_efficiency, DIRECT_CONV.tensor_efficiency), rate, name, True


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
    effs, rate, rate_name, small = _pricing(report, best, t)
    for k, share in gemms:
        hits.append(k.name)
        if r is not None and r.flops > 0 and total_ms > 0 and not is_latency_bound(k, v):
            # the problem's FLOPs (split by time among its GEMMs) at the faster path's peak x a first tensor-core
            # kernel's efficiency, on the SMs the grid can use, against the time the kernel takes now
            sms = report.sm_count or v.default_sm_count
            used = min(1.0, k.blocks / sms) if k.blocks and sms else 1.0  # all SMs where either is unknown
            k_ms = share * total_ms
            low_g, high_g = (
                share * max(0.0, 1 - r.flops * (share / gemm_share) / (rate * eff * used) * 1e3 / k_ms) for eff in effs
            )
            gain, high = gain + low_g, high + high_g
            bases.add(f"1 - FLOPs / ({rate_name} peak x {effs[0]:g}) / measured time")
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
            f"TFLOP/s against the FMA pipe's {fma / 1e12:.4g}. "
            + (SMALL_CONV_NOTE.format(eff=effs[0]) if small else efficiency_note(best.path, *effs, high)),
            kernels=hits,
            change=f"tensor cores ({best.path})",
            **({"priority": "low"} if uncertain else {}),
        )
    ]


use_tensor_cores = Rule("use_tensor_cores", _use_tensor_cores, COMPUTE, (DEVICE_KERNELS,))
