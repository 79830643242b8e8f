"""What a kernel is and which unit does its math, told from its name and, when the profile has
them, its pipe metrics. Rules need this: a Hopper tensor-core GEMM at 12% occupancy is normal,
an fp32 GEMM on the FMA pipe is leaving tensor cores idle, an element-wise kernel lives on DRAM.
The names and metrics themselves are the vendor's: each helper takes the vocabulary of the platform the
profile came from (``v``, advice/vocabulary.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kforge_mcp.platforms.base import Vocabulary
from kforge_mcp.platforms.formats import MEMCPY_METRIC
from kforge_mcp.profiling.report import KernelProfile


@dataclass(frozen=True)
class KindThresholds:
    busy_tensor_pct: float = 2.0  # a named GEMM with a tensor pipe above this uses it (an fp32 FMA GEMM reads 0)
    gemm_by_pipe_pct: float = 10.0  # an unnamed kernel is a GEMM when a tensor pipe is this busy (the hmma pipe
    # shares its counter with fp16 math: an element-wise kernel read 4-8% on the H100 corpus)
    mma_cycles_pct: float = 2.0  # the tensor cores busy above this means MMAs ran (an FMA-only conv read 0.06% there
    # while its hmma pipe counter read 3.26%, as much as its shared pipe: that counter alone cannot tell them apart;
    # an FMA-only direct conv read 1.39% on an H200, tensor-core convs 6% and more)
    fma_gemm_pct: float = 30.0  # a user-named kernel of a problem with FLOPs, this busy on the FMA pipe, does them
    # (a choice: well above what loads and index math keep the FMA pipe busy with, well under an FMA GEMM's 78%)
    # A kernel whose pipes wait on global memory: few issue slots used, no busy math pipe, DRAM and L1/shared far
    # from their peaks, warps on global-memory stalls. Its tensor pipe (if any) idles for that reason, so feeding
    # it is not the lever (gather-style convs on an H200: tensor pipe 6-12% busy, DRAM 3-16%, issue 14-30%).
    waiting_issue_pct: float = 40.0  # issue slots busy under this
    waiting_pipe_pct: float = 30.0  # ... no math pipe (tensor or FMA) busier than this
    waiting_dram_pct: float = 40.0  # ... DRAM under this
    waiting_memory_pct: float = 60.0  # ... nor L1/shared: a GEMM at 80% memory throughput waits on shared memory
    # A convolution's tensor-core kernel fed by its own gathers: the tensor pipe under 40% busy (a fed one keeps it
    # over 60%), no TMA, the warps waiting on global loads (convolutions on an H100: tensor pipe 7-11%, top stall
    # long_scoreboard, 5-30 sectors a request)
    gather_tensor_pct: float = 40.0
    gather_tma_pct: float = 1.0


KINDS = KindThresholds()


def busiest_tensor_pipe(k: KernelProfile, v: Vocabulary) -> tuple[str | None, float]:
    pipes = [(p, k.pipes[p]) for p in v.tensor_pipes if p in k.pipes]
    if not pipes and k.tensor_pipe_pct is not None:
        pipes = [("tensor", k.tensor_pipe_pct)]
    return max(pipes, key=lambda x: x[1]) if pipes else (None, 0.0)


def executed_mma(k: KernelProfile, v: Vocabulary, t: KindThresholds = KINDS) -> tuple[str | None, str] | None:
    """The MMA instructions the kernel ran, told from what ran (its PTX, the wgmma instructions executed, the tensor
    cores' own cycles), never from the hmma pipe's counter alone: (unit, or None for none; the evidence), or None
    when the profile has none of these."""
    compiled, issued = v.compiled_mma, v.issued_mma
    if compiled.metric in k.metrics:
        unit = compiled.units.get(k.metrics[compiled.metric])
        return unit, f"{compiled.code}: " + compiled.instructions.get(unit or "", "no MMA instructions")
    if k.metrics.get(issued.metric, 0.0) > 0:
        return issued.unit, f"{issued.unit} instructions {k.metrics[issued.metric]:.2g}% of peak"
    cycles = k.metrics.get(v.tensor_cycles.metric)
    if cycles is None:
        return None
    if cycles <= t.mma_cycles_pct:
        return None, f"tensor cores {cycles:.2g}% busy"
    return v.tensor_cycles.unit, f"tensor cores {cycles:.2g}% busy, no {issued.unit}"


def classify(
    k: KernelProfile,
    v: Vocabulary,
    flops_known: bool = False,
    conv_problem: bool = False,
    hottest: bool = False,
    t: KindThresholds = KINDS,
) -> KernelProfile:
    """Fill k.category, k.compute_path and k.kind_basis (in place; returns k). ``conv_problem``: the problem's
    FLOPs are mostly a convolution's, so a kernel that runs MMAs under a name that says nothing is its convolution
    (the gmma counter and the PTX count MMAs alone, so any activity there says so); ``hottest``: the kernel is
    taken as the convolution where no name or metric places it (classify_all)."""
    name = k.name
    names = v.kernel_names
    pipe, busy = busiest_tensor_pipe(k, v)
    by_name = v.name_operand(name)
    gemm_name = bool(names.gemm.search(name)) and not names.conv.search(name)
    mma = k.pipes.get(v.mma_pipe, 0.0) >= t.busy_tensor_pct or k.metrics.get(v.compiled_mma.metric, 0.0) > 0
    basis = []
    if names.conv.search(name):
        kind = "conv"
        basis.append("name")
    elif gemm_name:
        kind = "gemm"
        basis.append("name")
    elif (pipe and busy >= t.gemm_by_pipe_pct) or (conv_problem and mma):
        kind = "conv" if conv_problem else "gemm"
        basis.append(f"{pipe} pipe {busy:.0f}%" if pipe else f"{v.compiled_mma.code} MMA instructions")
        if conv_problem:
            basis.append("the problem's convolution FLOPs")
    elif MEMCPY_METRIC in k.metrics or names.memcpy.search(name):
        kind = "copy"
        basis.append("name")
    elif names.reduction.search(name) or names.elementwise.search(name) or names.copy.search(name):
        kind = (
            "reduction" if names.reduction.search(name) else "elementwise" if names.elementwise.search(name) else "copy"
        )
        basis.append("name")
    elif flops_known and (k.fma_pipe_pct or 0) >= t.fma_gemm_pct:
        kind = "conv" if conv_problem else "gemm"  # a user-named kernel of a problem with FLOPs, busy on the FMA pipe
        basis.append(f"the problem's {'convolution' if conv_problem else 'matmul'} FLOPs")
    elif conv_problem and hottest:
        kind = "conv"
        basis.append("the problem's convolution FLOPs: its longest kernel")
    else:
        kind = "other"
    path = None
    ran = executed_mma(k, v, t) if kind in ("gemm", "conv") else None
    if ran is not None:  # instructions say which unit did the math, whatever a pipe's cycles read
        unit, said = ran
        path = (f"{unit} ({by_name})" if by_name and by_name != "fp32" else unit) if unit else "fma"
        basis.append(said)
    elif kind in ("gemm", "conv") and pipe and busy >= t.busy_tensor_pct and k.pipes:
        unit = v.pipe_units.get(pipe, pipe)
        path = f"{unit} ({by_name})" if by_name and by_name != "fp32" else unit
        basis.append(f"{pipe} {busy:.0f}%")
    elif kind in ("gemm", "conv"):
        if pipe is not None or k.fma_pipe_pct is not None:  # metrics say: no tensor pipe in use
            path = "fma"
            basis.append(
                f"tensor pipes {busy:.0f}%" + (f", FMA {k.fma_pipe_pct:.0f}%" if k.fma_pipe_pct is not None else "")
            )
        elif by_name:
            path = "fma" if by_name == "fp32" else v.name_unit(name)
            path = path if by_name == "fp32" else f"{path} ({by_name})"
    k.category, k.compute_path = kind, path
    k.kind_basis = ", ".join(dict.fromkeys(basis)) or None
    return k


def classify_all(
    kernels: list[KernelProfile], v: Vocabulary, flops_known: bool = False, conv_problem: bool = False
) -> None:
    """classify each kernel; in a convolution problem where none is a GEMM or convolution by name or metrics, the
    one that takes the most time and no name places elsewhere does the convolution's FLOPs (a single fused kernel)."""
    for k in kernels:
        classify(k, v, flops_known, conv_problem)
    if conv_problem and not any(k.category in ("gemm", "conv") for k in kernels):
        hot = max((k for k in kernels if k.category == "other"), key=lambda k: k.device_ms, default=None)
        if hot is not None:
            classify(hot, v, flops_known, conv_problem, hottest=True)


def is_tensor_gemm(k: KernelProfile) -> bool:
    return k.category in ("gemm", "conv") and bool(k.compute_path) and k.compute_path != "fma"


def is_fma_gemm(k: KernelProfile) -> bool:
    return k.category in ("gemm", "conv") and k.compute_path == "fma"


def is_latency_bound(k: KernelProfile, v: Vocabulary, t: KindThresholds = KINDS) -> bool:
    """The pipes wait on global memory (KindThresholds' waiting_* figures): the lever is more bytes in flight per
    SM and more independent work per program, not feeding a tensor pipe."""
    if k.issue_active_pct is None or not k.top_stalls:
        return False
    _, tensor = busiest_tensor_pipe(k, v)
    return (
        k.issue_active_pct < t.waiting_issue_pct
        and max(tensor, k.fma_pipe_pct or 0.0) < t.waiting_pipe_pct
        and (k.dram_throughput_pct or 0.0) < t.waiting_dram_pct
        and (k.memory_throughput_pct or 0.0) < t.waiting_memory_pct
        and k.top_stalls[0].reason in v.global_latency_stalls
    )


def multi_term(path: str | None) -> bool:
    """A path that does each product as several tensor-core products of split operands (3xtf32, bf16x3, ...)."""
    return path is not None and bool(re.search(r"\d+x[a-z]|[a-z]\d*x\d", path))


def few_channels_per_tap(convs: list, mma_k: int | None) -> int | None:
    """The input channels a tap gives (C_in / groups, the largest over the problem's convolutions) where every
    convolution gives fewer than the smallest K of an MMA step on the device (``mma_k``, the platform's table), else
    None: a K loop by tap pads each tap to that K, and any form gathers each input element again for every tap into
    products too thin for the tensor pipe to limit."""
    widest = max((c.c_in // max(1, c.groups) for c in convs), default=None)
    return widest if widest is not None and mma_k and widest < mma_k else None


def is_gather_fed_conv(k: KernelProfile, v: Vocabulary, conv_problem: bool, t: KindThresholds = KINDS) -> bool:
    """A tensor-core kernel of a convolution problem whose MMAs wait on the operands it gathers itself (computed
    offsets, masked at the borders): a regime of its own (advice/rules/conv.py), not a GEMM to feed with TMA."""
    if not conv_problem or not is_tensor_gemm(k) or not k.top_stalls or is_latency_bound(k, v, t):
        return False  # a kernel whose every unit idles is latency-bound: latency_bound speaks for it
    _, busy = busiest_tensor_pipe(k, v)
    return (
        busy < t.gather_tensor_pct
        and k.pipes.get(v.copy_pipe, 0.0) < t.gather_tma_pct
        and k.top_stalls[0].reason in v.global_latency_stalls
    )
