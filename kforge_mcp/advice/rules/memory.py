"""How memory is touched: uncoalesced global accesses, shared-memory bank conflicts, register
spills to local memory, and atomics that serialize. The metrics are those of Nsight Compute's
memory workload analysis and source counters (sectors per request, wavefronts per instruction,
local sectors, atomic instructions).
"""

from __future__ import annotations

from kforge_mcp.advice.kinds import is_tensor_gemm
from kforge_mcp.advice.rules.base import ev, hot_kernels, pct, recommendation, rule
from kforge_mcp.profiling.report import KernelProfile, ProfileReport, Recommendation

TENSOR_GEMM_FACTOR = 0.1
DRAM_BOUND_PCT = 60.0  # DRAM this busy: the kernel streams DRAM and L1/L2 absorb wasted sectors
DRAM_CEIL_PCT = 85.0  # what a coalesced streaming kernel reaches (77-89% on an H200)
IDEAL_SECTORS_PER_REQUEST = 4  # a warp's 32 x 4-byte access: 128 bytes = 4 sectors
LATENCY_STALLS = ("long_scoreboard", "lg_throttle", "mio_throttle", "short_scoreboard", "membar", "drain")


def wasted_sectors(k: KernelProfile) -> tuple[float, float]:
    """(total, wasted) global sectors: from useful bytes per sector, else from sectors per request."""
    total = wasted = 0.0
    for sectors, per_sector, per_request in (
        (k.global_load_sectors, k.global_load_bytes_per_sector, k.global_load_sectors_per_request),
        (k.global_store_sectors, k.global_store_bytes_per_sector, k.global_store_sectors_per_request),
    ):
        if not sectors:
            continue
        if per_sector:  # 0 means no LDG/STG measured (cp.async or TMA loads): fall back to sectors per request
            total += sectors
            wasted += sectors * (1 - min(per_sector, 32) / 32)
        elif per_request is not None:
            total += sectors
            if per_request > 16:  # 16-byte vectors legitimately use 16 sectors per request
                wasted += sectors * (1 - IDEAL_SECTORS_PER_REQUEST / per_request)
    return total, wasted


# What each memory rule fires on, one definition shared with the rules that must defer to them
# (latency_bound: the stalls follow from the pathology; at_the_limit: DRAM busy with waste is no limit).
WASTED_MIN, CONFLICT_MIN, LOCAL_MIN, ATOMIC_MIN = 0.2, 0.2, 0.05, 0.01


def wasted_fraction(k: KernelProfile) -> float:
    total, wasted = wasted_sectors(k)
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


def memory_pathology(k: KernelProfile) -> bool:
    """A pattern one of the memory rules names: wasted sectors, bank conflicts, spills or atomics."""
    return (
        wasted_fraction(k) >= WASTED_MIN
        or conflict_fraction(k) >= CONFLICT_MIN
        or local_fraction(k) >= LOCAL_MIN
        or atomic_fraction(k) >= ATOMIC_MIN
    )


@rule
def uncoalesced_access(report: ProfileReport) -> list[Recommendation]:
    hits, gain, evidence = [], 0.0, []
    for k, share in hot_kernels(report):
        waste = wasted_fraction(k)
        if waste < WASTED_MIN:
            continue
        total, wasted = wasted_sectors(k)
        dram = (k.dram_bytes_read or 0.0) + (k.dram_bytes_write or 0.0)
        dram_pct = k.dram_throughput_pct or 0.0
        if dram_pct >= DRAM_BOUND_PCT and dram > 0:
            # DRAM-bound: the wasted sectors are served by L1/L2; only DRAM bytes over what the accesses use go away
            excess = max(0.0, 1 - (total - wasted) * 32 / dram)
            if excess < 0.02:
                continue
            g = excess
        elif dram_pct >= DRAM_BOUND_PCT:
            g = waste * max(0.0, 1 - dram_pct / DRAM_CEIL_PCT)
        else:
            mem_bound = (k.memory_throughput_pct or 0) >= (k.sm_throughput_pct or 0)
            g = waste * (1.0 if mem_bound else 0.5)
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
            action="Make consecutive threads (the fastest tl.arange axis / threadIdx.x) touch consecutive addresses: "
            "put the contiguous dimension innermost, load 16-byte vectors (float4 / tl.load on a contiguous block), "
            "for transposes stage a tile through shared memory (padded, tile[32][33]) and write it out row-wise, "
            "and for gathers sort or bucket the indices so a warp's reads share sectors.",
            expected_gain=gain,
            gain_basis="time share x wasted fraction of the sectors moved (halved where the kernel is not "
            "memory-bound): a kernel bound by L1/L2 sector throughput scales with the sectors it moves (on an "
            f"H200 transposes and column walks realized 0.85-0.90 where this gave 0.78-0.88); with DRAM at >= "
            f"{DRAM_BOUND_PCT:g}% only the DRAM bytes over the bytes the accesses use count (stride-2 loads whose "
            "other half the next load used realized 0.01)",
            kernels=hits,
        )
    ]


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


@rule
def shared_bank_conflicts(report: ProfileReport) -> list[Recommendation]:
    hits, gain, evidence, tensor_gemms = [], 0.0, [], []
    for k, share in hot_kernels(report):
        frac = conflict_fraction(k)
        if frac < CONFLICT_MIN:
            continue
        conflicts, wavefronts = k.shared_bank_conflicts, k.shared_wavefronts
        assert conflicts is not None and wavefronts is not None  # else conflict_fraction was 0
        stalled = bool(k.top_stalls and k.top_stalls[0].reason in ("mio_throttle", "short_scoreboard", "barrier"))
        g = frac * (0.6 if stalled else 0.3)
        if is_tensor_gemm(k):  # operand staging the compiler lays out: tile changes to such GEMMs realized 0.06-0.14
            g *= TENSOR_GEMM_FACTOR
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
            action="Threads of a warp hit the same bank: pad the shared array by one element per row "
            "(__shared__ float tile[32][33]) or swizzle the column index (col ^ row), so a column read of a tile "
            "spreads over all 32 banks; on Hopper, TMA with a swizzled layout does it for you.",
            expected_gain=gain,
            gain_basis="time share x conflict fraction of the shared wavefronts x 0.6 where the top stall is the "
            "shared pipe (mio_throttle / short_scoreboard / barrier), else x 0.3: only the time spent waiting on "
            "shared memory shrinks"
            + (
                f"; x {TENSOR_GEMM_FACTOR:g} for tensor-core GEMMs, whose operand layout the compiler picks (not "
                "measured on a pair; 3xTF32 GEMMs stalled on shared memory gained 0.06-0.14 from tile changes)"
                if tensor_gemms
                else ""
            ),
            kernels=hits,
            **({"priority": "low"} if tensor_gemms and len(tensor_gemms) == len(hits) else {}),
        )
    ]


@rule
def register_spills(report: ProfileReport) -> list[Recommendation]:
    hits, gain, evidence = [], 0.0, []
    for k, share in hot_kernels(report):
        local, frac = k.local_sectors or 0.0, local_fraction(k)
        if frac >= LOCAL_MIN:
            gain += share * frac * 0.8
            evidence += [
                ev("local-memory sectors", local, "0", k.name),
                ev("local share of LSU sectors", round(frac, 3), "0", k.name),
            ]
        elif k.spills:  # compile metadata only (a trace without metrics)
            gain += share * 0.1
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
            action="Per-thread state lives in local memory (spills, or an array indexed at run time): unroll loops "
            "over small arrays so every index is a compile-time constant, keep fewer values live (smaller tiles per "
            "thread, fewer accumulators), and give the compiler room (__launch_bounds__ with fewer min blocks, no "
            "tight -maxrregcount; in Triton more num_warps for the same BLOCK or a smaller BLOCK).",
            expected_gain=gain,
            gain_basis="time share x local share of the LSU sectors x 0.8 (local traffic costs like global); "
            "0.1 x share when only the compiler's spill count is known",
            kernels=hits,
        )
    ]


@rule
def atomic_contention(report: ProfileReport) -> list[Recommendation]:
    hits, gain, evidence = [], 0.0, []
    for k, share in hot_kernels(report):
        atoms = k.atomic_instructions or 0.0
        if atomic_fraction(k) < ATOMIC_MIN:
            continue
        busy = max(k.dram_throughput_pct or 0.0, k.memory_throughput_pct or 0.0)
        if busy >= 80:
            continue  # atomics at memory speed are not contended
        gain += share * (1 - busy / 80)
        hits.append(k.name)
        evidence += [
            ev("global atomic instructions", atoms, "one per block per bin", k.name),
            ev("atomics per instruction", round(atomic_fraction(k), 3), f"< {ATOMIC_MIN}", k.name),
            ev("memory throughput", pct(busy), "~80% once atomics no longer serialize", k.name),
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
            action="Many threads update the same addresses and the updates serialize in L2. Reduce first within a "
            "warp (__shfl_down_sync, or tl.sum / tl.histogram over a block in Triton), then within a block in shared "
            "memory (per-block bins), and issue one atomic per block per output; or write per-block partials and "
            "reduce them in a second pass.",
            expected_gain=gain,
            gain_basis="time share x (1 - memory throughput / 80%): without contention the kernel streams its "
            "input at memory speed",
            kernels=hits,
        )
    ]
