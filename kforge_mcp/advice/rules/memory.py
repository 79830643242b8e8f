"""How memory is touched: uncoalesced global accesses, shared-memory bank conflicts, register
spills to local memory, and atomics that serialize. The metrics are those of Nsight Compute's
memory workload analysis and source counters (sectors per request, wavefronts per instruction,
local sectors, atomic instructions).
"""

from __future__ import annotations

from dataclasses import dataclass

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.kinds import is_tensor_gemm
from kforge_mcp.advice.rules.base import (
    ATOMICS,
    DEVICE_KERNELS,
    GLOBAL_SECTORS,
    LOCAL_MEMORY,
    SECTORS,
    SHARED_WAVEFRONTS,
    Rule,
    Wording,
    ev,
    hot_kernels,
    pct,
    recommendation,
)
from kforge_mcp.platforms.base import Vocabulary
from kforge_mcp.profiling.report import KernelProfile, ProfileReport, Recommendation


@dataclass(frozen=True)
class MemoryThresholds:
    # What each memory rule fires on, one definition shared with the rules that must defer to them
    # (latency_bound: the stalls follow from the pathology; at_the_limit: DRAM busy with waste is no limit)
    # (each a choice, well under what the kernels built with the pathology showed: the H200 transposes and column
    # walks wasted 0.78-0.88 of their sectors)
    wasted_min: float = 0.2  # a fifth of the sectors moved carry no useful byte
    conflict_min: float = 0.2  # a fifth of the shared wavefronts are bank-conflict replays
    local_min: float = 0.05  # local memory is 5% of LSU traffic: spills cost like global loads
    atomic_min: float = 0.01  # one instruction in a hundred is a global atomic
    run_bytes_min: float = 20.0  # a warp whose request touches at most one sector more than a coalesced one, with
    # this many of a sector's 32 bytes used, reads one run of consecutive addresses shifted off a sector boundary or
    # cut by a mask (direct convolutions' tap windows: 22.9-24.5 bytes); no order of its lanes wastes less
    dram_bound_pct: float = 60.0  # DRAM this busy: the kernel streams DRAM and L1/L2 absorb wasted sectors
    dram_ceil_pct: float = 85.0  # what a coalesced streaming kernel reaches (77-89% on an H200)
    min_excess_dram: float = 0.02  # a DRAM-bound kernel moving under 2% more DRAM bytes than it uses has no waste
    compute_bound_waste_factor: float = 0.5  # wasted sectors cost half where the kernel is not memory-bound (a choice)
    memory_queue_pct: float = 40.0  # memory units under this busy serve wasted sectors without delaying warps that
    # wait on something else; the cost ramps up to its full at memory_full_pct (choices, from the pairs named at
    # their use: a transpose at 74% realized 0.88, convs at 24% and 47% realized 5% and -24%)
    memory_full_pct: float = 75.0
    negligible_waste_share: float = 0.01  # wasted sectors that peak bandwidth moves in under 1% of the kernel's time
    # are not worth a round (a choice; the transposes' waste took 30% and more)
    conflict_stalled_factor: float = 0.6  # share of conflict time saved when the top stall is the shared pipe
    conflict_factor: float = 0.3  # ... and when it is not: only the time spent waiting on shared memory shrinks
    tensor_gemm_factor: float = 0.1  # operand staging the compiler lays out: tile changes to such GEMMs realized
    # 0.06-0.14 (3xTF32 GEMMs stalled on shared memory, an H200)
    local_cost_factor: float = 0.8  # local traffic costs like global, less what L1 keeps
    compiled_spill_gain: float = 0.1  # the share of a kernel's time spills cost when only the compiler's count is
    # known (a choice: no pair measured)
    atomic_memory_pct: float = 80.0  # atomics at this memory throughput are not contended; without contention the
    # kernel streams its input at about this speed


MEMORY = MemoryThresholds()


def wasted_sectors(k: KernelProfile, v: Vocabulary, t: MemoryThresholds = MEMORY) -> tuple[float, float]:
    """(total, wasted) global sectors: from useful bytes per sector, else from sectors per request (none without
    the vocabulary's sector size). A warp's run of consecutive addresses off a sector boundary wastes no sector
    that coalescing saves: it counts as used."""
    total = wasted = 0.0
    for sectors, per_sector, per_request in (
        (k.global_load_sectors, k.global_load_bytes_per_sector, k.global_load_sectors_per_request),
        (k.global_store_sectors, k.global_store_bytes_per_sector, k.global_store_sectors_per_request),
    ):
        if not sectors or not v.sector_bytes:
            continue
        if per_sector:  # 0 means no LDG/STG measured (cp.async or TMA loads): fall back to sectors per request
            total += sectors
            if shifted_runs(per_sector, per_request, v, t):
                continue  # a direct conv whose lanes moved onto one run of 32 voxels gained -4% for 20% promised
            wasted += sectors * (1 - min(per_sector, v.sector_bytes) / v.sector_bytes)
        elif per_request is not None:
            total += sectors
            if per_request > v.vector_sectors_per_request:
                # no LDG/STG ran (per_sector 0: cp.async or TMA, which copy 16-byte vectors): only the sectors past a
                # coalesced vector request's are waste (a gather-fed conv's cp.async loads read 18.9 sectors a
                # request: 15% over, not the 79% a 4-byte access would mean); unmeasured, a 4-byte access is assumed
                width = v.vector_sectors_per_request if per_sector == 0 else v.coalesced_sectors_per_request
                wasted += sectors * (1 - width / per_request)
    return total, wasted


def shifted_runs(per_sector: float, per_request: float | None, v: Vocabulary, t: MemoryThresholds = MEMORY) -> bool:
    """A warp's accesses are one run of consecutive addresses, shifted off a sector boundary or cut by a mask: at
    most one sector a request more than a coalesced access touches, most of each sector used."""
    return (
        per_request is not None and per_request <= v.coalesced_sectors_per_request + 1 and per_sector >= t.run_bytes_min
    )


def streaming_headroom(moved: float, k: KernelProfile, report: ProfileReport, t: MemoryThresholds = MEMORY) -> float:
    """The share of the kernel's time left over streaming ``moved`` bytes at DRAM's ceiling (dram_ceil_pct of peak
    bandwidth): what any change that still moves them can save at most (1 where the bandwidth or time is unknown)."""
    r = report.roofline
    if r is None or not r.peak_bandwidth or not k.mean_ms:
        return 1.0
    return max(0.0, 1 - moved / (r.peak_bandwidth * t.dram_ceil_pct / 100) * 1e3 / k.mean_ms)


def wasted_fraction(k: KernelProfile, v: Vocabulary) -> float:
    total, wasted = wasted_sectors(k, v)
    return wasted / total if total > 0 else 0.0


def conflict_fraction(k: KernelProfile) -> float:
    """Bank-conflict wavefronts over all shared wavefronts."""
    if not k.shared_bank_conflicts or not k.shared_wavefronts:
        return 0.0
    return min(k.shared_bank_conflicts / k.shared_wavefronts, 1.0)


def local_fraction(k: KernelProfile) -> float:
    """Local-memory sectors over all LSU sectors (local + global)."""
    local = k.local_sectors or 0.0
    moved = local + (k.global_load_sectors or 0.0) + (k.global_store_sectors or 0.0)
    return local / moved if moved > 0 else 0.0


def atomic_fraction(k: KernelProfile) -> float:
    return (k.atomic_instructions or 0.0) / k.instructions if k.instructions else 0.0


def memory_pathology(k: KernelProfile, v: Vocabulary, t: MemoryThresholds = MEMORY) -> bool:
    """A pattern one of the memory rules names: wasted sectors, bank conflicts, spills or atomics."""
    return (
        wasted_fraction(k, v) >= t.wasted_min
        or conflict_fraction(k) >= t.conflict_min
        or local_fraction(k) >= t.local_min
        or atomic_fraction(k) >= t.atomic_min
    )


COALESCE_WORDING = Wording(
    "Make consecutive threads touch consecutive addresses: put the contiguous dimension innermost, load 16-byte "
    "vectors, for transposes stage a tile through shared memory (padded by one element per row) and write it out "
    "row-wise, and for gathers sort or bucket the indices so a warp's reads share sectors.",
    {
        "triton": "Make consecutive lanes touch consecutive addresses: put the contiguous dimension on the fastest "
        "tl.arange axis of each block (offsets[None, :] along it), load whole contiguous blocks so the compiler "
        "emits 16-byte vector loads, for transposes load a tile along its contiguous axis and tl.trans it in "
        "registers before the store, and for gathers sort or bucket the indices so a warp's reads share sectors.",
        "cuda": "Make consecutive threads (threadIdx.x) touch consecutive addresses: put the contiguous dimension "
        "innermost, load 16-byte vectors (float4), for transposes stage a tile through padded shared memory "
        "(__shared__ float tile[32][33]) and write it out row-wise, and for gathers sort or bucket the indices so a "
        "warp's reads share sectors.",
        "cute": "Make consecutive threads touch consecutive addresses: choose thread layouts whose fastest mode runs "
        "along the tensor's contiguous mode, copy with 128-bit copy atoms (UniversalCopy<uint128_t>), stage "
        "transposes through a swizzled shared-memory layout, and sort gathers so a warp's reads share sectors.",
        "metal": "Make consecutive threads (thread_position_in_grid.x) touch consecutive addresses: put the "
        "contiguous dimension innermost, load float4 vectors, stage transposes through threadgroup memory padded by "
        "one element per row, and sort gathers so a SIMD-group's reads share cache lines.",
    },
)


def _uncoalesced_access(report: ProfileReport, t: MemoryThresholds) -> list[Recommendation]:
    v = vocabulary.of(report)
    hits, gain, evidence = [], 0.0, []
    for k, share in hot_kernels(report):
        waste = wasted_fraction(k, v)
        if waste < t.wasted_min:
            continue
        total, wasted = wasted_sectors(k, v)
        r = report.roofline
        if r is not None and r.peak_bandwidth and k.mean_ms:
            moved_in = wasted * v.sector_bytes / r.peak_bandwidth / (k.mean_ms / 1e3)  # share of its time at peak
            if moved_in < t.negligible_waste_share:
                continue  # a few stray loads (a bias read in an accumulator's layout: 200 KB wasted in a 0.66 ms
                # conv fed by TMA) waste half their sectors and cost nothing (promised 12%, realized 1%)
        dram = (k.dram_bytes_read or 0.0) + (k.dram_bytes_write or 0.0)
        dram_pct = k.dram_throughput_pct or 0.0
        if dram_pct >= t.dram_bound_pct and dram > 0:
            # DRAM-bound: the wasted sectors are served by L1/L2; only DRAM bytes over what the accesses use go away
            excess = max(0.0, 1 - (total - wasted) * v.sector_bytes / dram)
            if excess < t.min_excess_dram:
                continue
            g = excess
        elif dram_pct >= t.dram_bound_pct:
            g = waste * max(0.0, 1 - dram_pct / t.dram_ceil_pct)
        else:
            mem_bound = (k.memory_throughput_pct or 0) >= (k.sm_throughput_pct or 0)
            g = waste * (1.0 if mem_bound else t.compute_bound_waste_factor)
            waits_elsewhere = bool(k.top_stalls) and k.top_stalls[0].reason not in v.global_latency_stalls
            if waits_elsewhere and k.memory_throughput_pct is not None:
                # warps wait on something else (shared memory, the math pipes, fixed-latency waits): the sectors
                # cost time only as far as they queue in memory units near saturation (a conv whose gathers hit L1
                # while it waited on shared memory went from 7 to 29 useful bytes per sector, promised 78%, and
                # gained 1.6%; two transposed convs at 24% and 47% memory throughput whose stores were made whole
                # gained 5% and lost 24% for 30-50% promised)
                queued = (k.memory_throughput_pct - t.memory_queue_pct) / (t.memory_full_pct - t.memory_queue_pct)
                g *= min(1.0, max(0.0, queued))
        # coalesced, the kernel still moves the bytes its accesses use: no faster than those at DRAM's ceiling (a
        # pool whose window reads L1/L2 served, its DRAM bytes within 1% of the used ones, gained 5% where the waste
        # alone promised 86%)
        g = min(g, streaming_headroom((total - wasted) * v.sector_bytes, k, report, t))
        gain += share * g
        hits.append(k.name)
        evidence += [
            ev("sectors per request (loads)", _r(k.global_load_sectors_per_request), "4 for 4-byte elements", k.name),
            ev("sectors per request (stores)", _r(k.global_store_sectors_per_request), "4 for 4-byte elements", k.name),
            ev("useful bytes per 32-byte sector (loads)", k.global_load_bytes_per_sector, "32", k.name),
            ev("useful bytes per 32-byte sector (stores)", k.global_store_bytes_per_sector, "32", k.name),
            ev("wasted sector fraction", round(waste, 3), "0", k.name),
        ]
        if k.dram_throughput_pct is not None:
            evidence.append(ev("DRAM throughput", pct(k.dram_throughput_pct), "most of it useful", k.name))
    if not hits:
        return []
    return [
        recommendation(
            rule="uncoalesced_access",
            title="Coalesce global memory accesses",
            evidence=evidence,
            action=COALESCE_WORDING.say(report.target),
            expected_gain=gain,
            gain_basis="time share x wasted fraction of the sectors moved (halved where the kernel is not "
            f"memory-bound; where its warps wait on anything but global memory, x how far its memory units are "
            f"from {t.memory_queue_pct:g}% toward {t.memory_full_pct:g}% busy): a kernel bound by L1/L2 sector throughput scales with the sectors it "
            "moves (on an "
            f"H200 transposes and column walks realized 0.85-0.90 where this gave 0.78-0.88); with DRAM at >= "
            f"{t.dram_bound_pct:g}% only the DRAM bytes over the bytes the accesses use count (stride-2 loads whose "
            "other half the next load used realized 0.01); never more than the kernel's time over streaming the bytes "
            f"its accesses use at {t.dram_ceil_pct:g}% of peak bandwidth",
            kernels=hits,
        )
    ]


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


CONFLICT_WORDING = Wording(
    "Threads of a warp hit the same shared-memory bank: pad the shared array by one element per row or swizzle the "
    "column index (col ^ row), so a column read of a tile spreads over all 32 banks; on Hopper, TMA with a swizzled "
    "layout does it for you.",
    {
        "triton": "Threads of a warp hit the same shared-memory bank, in a layout Triton chose for your access: "
        "load tiles along their contiguous axis and transpose in registers (tl.trans) rather than loading a strided "
        "view, keep the operands of tl.dot contiguous along K, or try another BLOCK shape or num_warps; TMA loads "
        "(tl.make_tensor_descriptor) use swizzled layouts.",
        "cuda": "Threads of a warp hit the same bank: pad the shared array by one element per row "
        "(__shared__ float tile[32][33]) or swizzle the column index (col ^ row), so a column read of a tile "
        "spreads over all 32 banks; on Hopper, TMA with a swizzled CUtensorMap does it for you.",
        "cute": "Threads of a warp hit the same bank: give the shared-memory layout a Swizzle<3,4,3>-style swizzle "
        "(composition(Swizzle<...>{}, layout)) or pad its leading dimension, so a column read spreads over all 32 "
        "banks; TMA atoms with a swizzled layout do it for you.",
        "metal": "Threads of a SIMD-group hit the same threadgroup-memory bank: pad the threadgroup array by one "
        "element per row or swizzle the column index (col ^ row).",
    },
)


def _shared_bank_conflicts(report: ProfileReport, t: MemoryThresholds) -> list[Recommendation]:
    v = vocabulary.of(report)
    hits, gain, evidence, tensor_gemms = [], 0.0, [], []
    for k, share in hot_kernels(report):
        frac = conflict_fraction(k)
        if frac < t.conflict_min:
            continue
        conflicts, wavefronts = k.shared_bank_conflicts, k.shared_wavefronts
        assert conflicts is not None and wavefronts is not None  # else conflict_fraction was 0
        stalled = bool(k.top_stalls and k.top_stalls[0].reason in v.shared_pipe_stalls)
        g = frac * (t.conflict_stalled_factor if stalled else t.conflict_factor)
        if is_tensor_gemm(k):
            g *= t.tensor_gemm_factor
            tensor_gemms.append(k.name)
        gain += share * g
        hits.append(k.name)
        ways = wavefronts / max(wavefronts - conflicts, 1.0)
        evidence += [
            ev("bank-conflict wavefronts / all shared wavefronts", round(frac, 3), "0", k.name),
            ev("wavefronts per conflict-free wavefront", round(ways, 1), "1 (conflict-free)", k.name),
        ]
        if k.shared_instructions:
            evidence.append(
                ev(
                    "shared wavefronts per instruction",
                    round(wavefronts / k.shared_instructions, 2),
                    "1 for 4-byte accesses",
                    k.name,
                )
            )
        if k.top_stalls:
            evidence.append(ev(f"top stall: {k.top_stalls[0].reason}", k.top_stalls[0].cycles_per_issue, kernel=k.name))
    if not hits:
        return []
    return [
        recommendation(
            rule="shared_bank_conflicts",
            title="Remove shared-memory bank conflicts",
            evidence=evidence,
            action=CONFLICT_WORDING.say(report.target),
            expected_gain=gain,
            gain_basis=f"time share x conflict fraction of the shared wavefronts x {t.conflict_stalled_factor:g} where "
            "the top stall is the shared pipe (mio_throttle / short_scoreboard / barrier), else x "
            f"{t.conflict_factor:g}: only the time spent waiting on shared memory shrinks"
            + (
                f"; x {t.tensor_gemm_factor:g} for tensor-core GEMMs, whose operand layout the compiler picks (not "
                "measured on a pair; 3xTF32 GEMMs stalled on shared memory gained 0.06-0.14 from tile changes)"
                if tensor_gemms
                else ""
            ),
            kernels=hits,
            **({"priority": "low"} if tensor_gemms and len(tensor_gemms) == len(hits) else {}),
        )
    ]


SPILL_WORDING = Wording(
    "Per-thread state lives in local memory (spills, or an array indexed at run time): unroll loops over small "
    "arrays so every index is a compile-time constant, keep fewer values live (smaller tiles per thread, fewer "
    "accumulators), and give the compiler more registers per thread (fewer threads per SM).",
    {
        "triton": "Per-thread state lives in local memory (spills): keep fewer values live per thread (a smaller "
        "BLOCK, or more num_warps for the same BLOCK so each thread holds less; fewer num_stages in a dot loop), and "
        "index small arrays with tl.static_range so every index is a compile-time constant.",
        "cuda": "Per-thread state lives in local memory (spills, or an array indexed at run time): unroll loops over "
        "small arrays (#pragma unroll) so every index is a compile-time constant, keep fewer values live (smaller "
        "tiles per thread, fewer accumulators), and give the compiler room (__launch_bounds__ with fewer min blocks, "
        "no tight -maxrregcount).",
    },
)


def _register_spills(report: ProfileReport, t: MemoryThresholds) -> list[Recommendation]:
    hits, gain, evidence = [], 0.0, []
    for k, share in hot_kernels(report):
        local, frac = k.local_sectors or 0.0, local_fraction(k)
        if frac >= t.local_min:
            gain += share * frac * t.local_cost_factor
            evidence += [
                ev("local-memory sectors", local, "0", k.name),
                ev("local share of LSU sectors", round(frac, 3), "0", k.name),
            ]
        elif k.spills:  # compile metadata only (a trace without metrics)
            gain += share * t.compiled_spill_gain
            evidence.append(ev("spilled registers (compiler)", k.spills, "0", k.name))
        else:
            continue
        hits.append(k.name)
        if k.registers is not None:
            evidence.append(ev("registers per thread", k.registers, kernel=k.name))
    if not hits:
        return []
    return [
        recommendation(
            rule="register_spills",
            title="Stop spilling registers to local memory",
            evidence=evidence,
            action=SPILL_WORDING.say(report.target),
            expected_gain=gain,
            gain_basis=f"time share x local share of the LSU sectors x {t.local_cost_factor:g} (local traffic costs "
            f"like global); {t.compiled_spill_gain:g} x share when only the compiler's spill count is known",
            kernels=hits,
            change="stop spilling registers",
        )
    ]


ATOMIC_WORDING = Wording(
    "Many threads update the same addresses and the updates serialize in L2. Reduce first within a warp, then "
    "within a block in shared memory (per-block bins), and issue one atomic per block per output; or write "
    "per-block partials and reduce them in a second pass.",
    {
        "triton": "Many programs update the same addresses and the updates serialize in L2. Reduce within each "
        "program first (tl.sum over the block, or tl.histogram for bins), and issue one tl.atomic_add per program per "
        "output; or store per-program partials and reduce them in a second kernel.",
        "cuda": "Many threads update the same addresses and the updates serialize in L2. Reduce first within a warp "
        "(__shfl_down_sync), then within a block in shared memory (per-block bins), and issue one atomicAdd per block "
        "per output; or write per-block partials and reduce them in a second pass.",
        "metal": "Many threads update the same addresses and the updates serialize. Reduce first within a SIMD-group "
        "(simd_sum), then within a threadgroup in threadgroup memory, and issue one atomic_fetch_add_explicit per "
        "threadgroup per output.",
    },
)


def _atomic_contention(report: ProfileReport, t: MemoryThresholds) -> list[Recommendation]:
    hits, gain, evidence = [], 0.0, []
    for k, share in hot_kernels(report):
        atoms = k.atomic_instructions or 0.0
        if atomic_fraction(k) < t.atomic_min:
            continue
        busy = max(k.dram_throughput_pct or 0.0, k.memory_throughput_pct or 0.0)
        if busy >= t.atomic_memory_pct:
            continue  # atomics at memory speed are not contended
        gain += share * (1 - busy / t.atomic_memory_pct)
        hits.append(k.name)
        evidence += [
            ev("global atomic instructions", atoms, "one per block per bin", k.name),
            ev("atomics per instruction", round(atomic_fraction(k), 3), f"< {t.atomic_min}", k.name),
            ev("memory throughput", pct(busy), f"~{t.atomic_memory_pct:g}% once atomics no longer serialize", k.name),
        ]
        if k.top_stalls:
            evidence.append(ev(f"top stall: {k.top_stalls[0].reason}", k.top_stalls[0].cycles_per_issue, kernel=k.name))
    if not hits:
        return []
    return [
        recommendation(
            rule="atomic_contention",
            title="Privatize the atomics: reduce in registers and shared memory first",
            evidence=evidence,
            action=ATOMIC_WORDING.say(report.target),
            expected_gain=gain,
            gain_basis=f"time share x (1 - memory throughput / {t.atomic_memory_pct:g}%): without contention the "
            "kernel streams its input at memory speed",
            kernels=hits,
        )
    ]


uncoalesced_access = Rule(
    "uncoalesced_access", _uncoalesced_access, MEMORY, (DEVICE_KERNELS, GLOBAL_SECTORS), terms=(SECTORS,)
)
shared_bank_conflicts = Rule(
    "shared_bank_conflicts", _shared_bank_conflicts, MEMORY, (DEVICE_KERNELS, SHARED_WAVEFRONTS)
)
register_spills = Rule("register_spills", _register_spills, MEMORY, (DEVICE_KERNELS, LOCAL_MEMORY))
atomic_contention = Rule("atomic_contention", _atomic_contention, MEMORY, (DEVICE_KERNELS, ATOMICS))
