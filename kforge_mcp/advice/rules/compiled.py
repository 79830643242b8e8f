"""Advice where no GPU ran the kernels (a profile on the CPU, the Triton interpreter), from the candidate
compiled for an NVIDIA arch (registers, spills, shared memory, warps, stages, the MMA instructions it
issues) set against a device model's roofline. How the time splits among the kernels is unknown there,
so each of N kernels is taken as 1/N of it, and every basis says so. What needs a GPU run (pipe, stall
and memory metrics) is left to the rules that read them; the agent lists those as not run.
"""

from __future__ import annotations

from dataclasses import dataclass

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.rules.base import COMPILED, FLOPS_ROOFLINE, Rule, ev, recommendation
from kforge_mcp.advice.rules.compute import COMPUTE
from kforge_mcp.advice.rules.fed import FEED_WORDING
from kforge_mcp.advice.rules.launch import LATENCY_WORDING, LAUNCH
from kforge_mcp.advice.rules.memory import MEMORY, SPILL_WORDING
from kforge_mcp.advice.rules.tensor_cores import (
    best_path,
    efficiency_note,
    efficiency_range,
    tensor_action,
)
from kforge_mcp.core.schemas import KernelResources
from kforge_mcp.platforms.base import Vocabulary
from kforge_mcp.profiling.report import ProfileReport, Recommendation


@dataclass(frozen=True)
class CompiledThresholds:
    enough_resident_warps: int = 16  # a quarter of Hopper's 64 warps per SM, the achieved occupancy latency_bound's
    # evidence calls enough (a choice: not calibrated on a pair, so such advice is low priority)
    pipelined_stages: int = 2  # a loop of MMAs with fewer stages waits for each tile's load before its MMAs
    stages_gain: float = 0.42  # a bf16 GEMM taken from 1 to 4 stages realized 0.42 on an H200 (feed_bf16_stages): the
    # one pair measured, so such advice is low priority


COMPILED_KERNELS = CompiledThresholds()


def _kernels(report: ProfileReport) -> tuple[list[KernelResources], float, str]:
    """The compiled kernels, each kernel's assumed share of the time, and the basis of that share."""
    assert report.compiled is not None  # the COMPILED need
    ks = report.compiled.kernels
    names = sorted({k.name for k in ks})
    how = "the kernel's share unknown without a GPU run: " + (
        "the one kernel takes all of it"
        if len(names) == 1
        else f"each of the {len(names)} kernels taken as 1/{len(names)}"
    )
    return ks, 1 / len(names), how


def _label(k: KernelResources) -> str:
    return f"{k.name} [{k.config}]" if k.config else k.name


def _arch(report: ProfileReport) -> str:
    assert report.compiled is not None
    return report.compiled.arch or "the default arch"


def _compiled_tensor_cores(report: ProfileReport, t: CompiledThresholds) -> list[Recommendation]:
    ks, _, _ = _kernels(report)
    if any(k.mma is None for k in ks) or any(k.mma != "none" for k in ks):
        return []  # the MMAs are unknown, or a kernel runs them already
    r = report.roofline
    best, fma = best_path(report)
    if r is None or best is None or not fma or best.peak_flops <= fma * COMPUTE.faster_path_factor:
        return []
    byte_ms = r.bytes / r.peak_bandwidth * 1e3
    fma_ms = max(r.flops / fma * 1e3, byte_ms)  # an FMA kernel at the FMA pipe's peak: the best it can do
    low, high = efficiency_range(best.path)
    gain_low, gain_high = (1 - max(r.flops / (best.peak_flops * eff) * 1e3, byte_ms) / fma_ms for eff in (low, high))
    if gain_high < COMPUTE.worth_gain:
        return []
    uncertain = gain_low < COMPUTE.worth_gain
    action = (
        f"No kernel issues MMA instructions for {_arch(report)}: the products run on the FMA pipe. Use "
        f"{tensor_action(best.path, report.target)}. Keep the fused epilogue in registers after the products."
    )
    if uncertain:
        action += (
            f" Uncertain: whether {best.path} beats an FMA kernel depends on how well the compiler lowers it; time "
            "both on the GPU before committing to it."
        )
    return [
        recommendation(
            rule="compiled_tensor_cores",
            title=f"Do the matrix products on tensor cores ({best.path})",
            evidence=[
                *(ev("MMA instructions in the compiled kernel", k.mma, "wgmma or mma.sync", _label(k)) for k in ks),
                ev("fastest path within the tolerance", f"{best.path}: {best.peak_flops / 1e12:.4g} TFLOP/s", best.why),
                ev("FMA (fp32) peak", f"{fma / 1e12:.4g} TFLOP/s"),
                ev("bound on the FMA pipe", f"{fma_ms * 1e3:.4g} us ({r.device})"),
                ev("bound on the path", f"{r.sol_ms * 1e3:.4g} us ({r.path} on {r.device})"),
            ],
            action=action,
            expected_gain=max(gain_low, 0.0),
            expected_gain_high=gain_high if low != high else None,
            gain_basis=f"1 - T({best.path} at a first kernel's efficiency) / T(FMA pipe at its peak) on the {r.device} "
            f"model's peaks: against the best an FMA kernel can do, so the least the change gains. "
            f"{efficiency_note(best.path, low, high, gain_high)}",
            change=f"tensor cores ({best.path})",
            **({"priority": "low"} if uncertain else {}),
        )
    ]


def _compiled_pipeline(report: ProfileReport, t: CompiledThresholds) -> list[Recommendation]:
    ks, share, how = _kernels(report)
    shallow = [
        k for k in ks if k.mma not in (None, "none") and k.num_stages is not None and k.num_stages < t.pipelined_stages
    ]
    if not shallow:
        return []
    return [
        recommendation(
            rule="compiled_pipeline",
            title="Pipeline the loads under the MMAs (more stages)",
            evidence=[
                ev("pipeline stages", k.num_stages, f">= {t.pipelined_stages} (3-5)", _label(k)) for k in shallow
            ],
            action=FEED_WORDING.say(report.target),
            expected_gain=len({k.name for k in shallow}) * share * t.stages_gain,
            gain_basis=f"{how}; x {t.stages_gain:g}, what one bf16 GEMM gained from 1 to 4 stages on an H200 (one "
            "pair: low priority until a GPU profile shows the tensor pipe waiting)",
            kernels=sorted({k.name for k in shallow}),
            change="feed the tensor pipe",
            priority="low",
        )
    ]


def _compiled_spills(report: ProfileReport, t: CompiledThresholds) -> list[Recommendation]:
    ks, share, how = _kernels(report)
    spilling = [k for k in ks if k.spills]
    if not spilling:
        return []
    evidence = [ev("bytes of local memory per thread (spills)", k.spills, "0", _label(k)) for k in spilling]
    evidence += [ev("registers per thread", k.registers, kernel=_label(k)) for k in spilling if k.registers]
    return [
        recommendation(
            rule="compiled_spills",
            title="Stop spilling registers to local memory",
            evidence=evidence,
            action=SPILL_WORDING.say(report.target),
            expected_gain=len({k.name for k in spilling}) * share * MEMORY.compiled_spill_gain,
            gain_basis=f"{how}; x {MEMORY.compiled_spill_gain:g}, the share of a kernel's time spills are taken to "
            "cost when only the compiler's count is known",
            kernels=sorted({k.name for k in spilling}),
            change="stop spilling registers",
        )
    ]


def resident_warps(k: KernelResources, v: Vocabulary, arch: str | None) -> tuple[int, str] | None:
    """Warps of this kernel one SM holds at once on the arch, and what limits them (registers rounded as
    allocated per thread, not per warp: an estimate); ``v``: the vocabulary of the platform the arch builds for."""
    limits = v.limits(arch)
    if limits is None or not k.num_warps or not v.warp_size:
        return None
    threads = k.num_warps * v.warp_size
    blocks = {"warps": limits.warps // k.num_warps, "blocks": limits.blocks}
    if k.registers:
        blocks["registers"] = limits.registers // (k.registers * threads)
    if k.shared_bytes:
        blocks["shared memory"] = limits.shared_bytes // k.shared_bytes
    limiter = min(blocks, key=lambda n: blocks[n])
    return blocks[limiter] * k.num_warps, limiter


def _occupancy_cause(
    k: KernelResources, v: Vocabulary, arch: str | None, products: bool, t: CompiledThresholds
) -> tuple[str, float, list] | None:
    """What caps this build's warps (few per program, or registers / shared memory per SM), the fraction of its
    time that estimate saves, and the evidence; None when nothing does."""
    if k.mma != "none" or not k.num_warps:
        return None
    resident = resident_warps(k, v, arch)
    if k.num_warps < LAUNCH.enough_warps:
        cause, saved = "few_warps", 1 - k.num_warps / LAUNCH.enough_warps
    elif not products and resident is not None and resident[0] < t.enough_resident_warps:
        cause, saved = "registers", 1 - resident[0] / t.enough_resident_warps
    else:
        return None
    evidence = [ev("warps per program", k.num_warps, f">= {LAUNCH.enough_warps:g}", _label(k))]
    if resident is not None:
        evidence += [
            ev(f"resident warps per SM on {arch}", resident[0], f">= {t.enough_resident_warps}", _label(k)),
            ev("what limits them", resident[1], kernel=_label(k)),
        ]
    return cause, saved, evidence


def _compiled_occupancy(report: ProfileReport, t: CompiledThresholds) -> list[Recommendation]:
    """Kernels without MMAs that launch few warps per program, or, in a problem without matrix products, whose
    registers or shared memory leave an SM few warps to hide a load with (a GEMM, on tensor cores or on the FMA
    pipe, runs one or two CTAs per SM by design: compiled_tensor_cores speaks for an FMA one). An autotuned kernel
    counts when every config it may pick has the cause, for the least its configs save."""
    ks, share, how = _kernels(report)
    arch = _arch(report)
    v = vocabulary.of_compile(report)
    products = report.roofline is not None and report.roofline.flops > 0
    hits, causes, evidence, gain = [], [], [], 0.0
    for name in sorted({k.name for k in ks}):
        found = [_occupancy_cause(k, v, arch, products, t) for k in ks if k.name == name]
        if not found or any(f is None for f in found):
            continue
        hits.append(name)
        gain += share * min(f[1] for f in found if f is not None)
        for f in found:
            if f is not None:
                causes.append(f[0])
                evidence += f[2]
    if not hits:
        return []
    return [
        recommendation(
            rule="compiled_occupancy",
            title="Give each SM enough warps to hide memory latency",
            evidence=evidence,
            action=" ".join(LATENCY_WORDING[c].say(report.target) for c in dict.fromkeys(causes)),
            expected_gain=gain,
            gain_basis=f"{how}; x (1 - warps per program / {LAUNCH.enough_warps:g}) for few warps (latency_bound's "
            f"estimate from the launch shape), x (1 - resident warps / {t.enough_resident_warps}) where registers or "
            "shared memory cap them (not calibrated: low priority)",
            kernels=hits,
            change="hide memory latency",
            **({} if "few_warps" in causes else {"priority": "low"}),
        )
    ]


compiled_tensor_cores = Rule(
    "compiled_tensor_cores", _compiled_tensor_cores, COMPILED_KERNELS, (COMPILED, FLOPS_ROOFLINE)
)
compiled_pipeline = Rule("compiled_pipeline", _compiled_pipeline, COMPILED_KERNELS, (COMPILED,))
compiled_spills = Rule("compiled_spills", _compiled_spills, COMPILED_KERNELS, (COMPILED,))
compiled_occupancy = Rule("compiled_occupancy", _compiled_occupancy, COMPILED_KERNELS, (COMPILED,))
