"""Performance rules: each a small function over a normalized ProfileReport that returns
Recommendations with evidence, a concrete action and an estimated gain.

expected_gain is a fraction of the profiled device time the change should save, estimated
from the profile itself (each rule says how in gain_basis). The estimates are deliberately
simple and capped; they rank advice, they do not promise a speedup.

Add a rule: write ``def my_rule(report) -> list[Recommendation]`` and decorate it with
``@rule``; it then runs in every analysis.
"""

from __future__ import annotations

from typing import Callable

from .report import Evidence, ProfileReport, Recommendation

Rule = Callable[[ProfileReport], list[Recommendation]]
RULES: list[Rule] = []
DEFAULT_SM_COUNT = 132  # H100 SXM; used when the profile does not say


def rule(fn: Rule) -> Rule:
    RULES.append(fn)
    return fn


def priority_for(gain: float) -> str:
    return "high" if gain >= 0.25 else "medium" if gain >= 0.08 else "low"


def recommendation(**kw) -> Recommendation:
    kw["expected_gain"] = round(max(0.0, min(0.95, kw["expected_gain"])), 3)
    kw.setdefault("priority", priority_for(kw["expected_gain"]))
    return Recommendation(**kw)


def shares(report: ProfileReport) -> dict[str, float]:
    ks = report.device_kernels()
    total = sum(k.device_ms for k in ks)
    return {k.name: (k.device_ms / total if total > 0 else 0.0) for k in ks}


def _pct(v: float | None) -> str | None:
    return None if v is None else f"{v:.1f}%"


# ---- rules ----


@rule
def fuse_launches(report: ProfileReport) -> list[Recommendation]:
    ks = [k for k in report.device_kernels() if "memcpy_or_memset" not in k.metrics]
    per_fwd = report.launches_per_forward or 0
    if len(ks) < 2 or per_fwd < 2:
        return []
    fwd = report.forwards or 1
    times = {k.name: k.device_ms / fwd for k in ks}
    total = sum(times.values())
    longest = max(times.values())
    gain = 1 - longest / total if total > 0 else 0.0
    ev = [Evidence(metric="launches per forward", value=round(per_fwd, 2), good="1 (one fused kernel)"),
          Evidence(metric="distinct kernels", value=len(ks), good="1"),
          Evidence(metric="device ms per forward", value=round(total, 5))]  # fmt: skip
    ev += [Evidence(metric="mean ms per launch", value=round(k.mean_ms, 5), kernel=k.name) for k in ks[:6]]
    if report.host_overhead_ms is not None:
        ev.append(Evidence(metric="host ms launching kernels per forward", value=round(report.host_overhead_ms, 4),
                           good="well under the device time"))  # fmt: skip
    return [recommendation(
        rule="fuse_launches",
        title=f"Fuse the {len(ks)} kernels of each forward into one",
        evidence=ev,
        action="Write one kernel for the whole forward: load each input once, keep intermediates in registers "
               "(e.g. x + bias -> gelu -> * scale, or a row's max, sum of exp and normalized output from one load "
               "with the row held in a block), and store only the final output. Each extra launch costs a launch "
               "latency plus a full write and re-read of the intermediate tensor in global memory.",
        expected_gain=gain,
        gain_basis=f"a fused memory-bound kernel takes about as long as the longest current kernel: "
                   f"1 - {longest:.4g} / {total:.4g} ms per forward (host launch time saved comes on top)",
        kernels=[k.name for k in ks],
    )]  # fmt: skip


@rule
def few_warps(report: ProfileReport) -> list[Recommendation]:
    share = shares(report)
    hits = [k for k in report.device_kernels() if (k.warps_per_block or 4) < 4 and share.get(k.name, 0) >= 0.05]
    if not hits:
        return []
    gain, ev = 0.0, []
    for k in hits:
        mem = (k.memory_throughput_pct or 0) / 100
        gain += share[k.name] * (1 - k.warps_per_block / 4) * (1 - mem)
        ev.append(Evidence(metric="warps per block", value=k.warps_per_block, good=">= 4 (128+ threads)", kernel=k.name))
        if k.achieved_occupancy_pct is not None:
            ev.append(Evidence(metric="achieved occupancy", value=_pct(k.achieved_occupancy_pct), good=">= 25%", kernel=k.name))
        if k.theoretical_occupancy_pct is not None and k.theoretical_occupancy_pct < 100:
            ev.append(Evidence(metric="theoretical occupancy", value=_pct(k.theoretical_occupancy_pct),
                               good="100% (blocks of 1 warp hit the blocks-per-SM limit)", kernel=k.name))  # fmt: skip
        if k.top_stalls:
            s = k.top_stalls[0]
            ev.append(Evidence(metric=f"top stall: {s.reason}", value=s.cycles_per_issue,
                               good="few cycles per issue (latency hidden by other warps)", kernel=k.name))  # fmt: skip
    return [recommendation(
        rule="few_warps",
        title="Use more warps per block to hide memory latency",
        evidence=ev,
        action="Launch with num_warps=4 or 8 (Triton) / 128-256 threads per block (CUDA) and give each program a "
               "whole row or a larger BLOCK (triton.next_power_of_2(n_cols)) instead of a 1-warp loop over chunks: "
               "with one warp per block an SM holds at most 32 warps and each warp stalls on every global load.",
        expected_gain=gain,
        gain_basis="sum over kernels of time share x (1 - warps/4) x (1 - memory throughput fraction): latency-bound "
                   "time shrinks with warps in flight until memory bandwidth saturates",
        kernels=[k.name for k in hits],
    )]  # fmt: skip


@rule
def grid_too_small(report: ProfileReport) -> list[Recommendation]:
    sms = report.sm_count or DEFAULT_SM_COUNT
    share = shares(report)
    hits = [k for k in report.device_kernels() if k.blocks is not None and k.blocks < sms and share.get(k.name, 0) >= 0.05]
    if not hits:
        return []
    gain = sum(share[k.name] * (1 - k.blocks / sms) * 0.75 for k in hits)
    ev = [Evidence(metric="blocks in the grid", value=k.blocks, good=f">= {sms} (one per SM)", kernel=k.name) for k in hits]
    ev.append(Evidence(metric="SMs", value=sms, good="" if report.sm_count else "assumed (H100)"))
    return [recommendation(
        rule="grid_too_small",
        title="Launch enough programs to use every SM",
        evidence=ev,
        action="Split the work into at least one program per SM: smaller output tiles (e.g. BLOCK_M/BLOCK_N 32-64 "
               "for a GEMM), split-K with a second reduction pass or atomics, or more rows per grid dimension. "
               "Idle SMs contribute nothing to bandwidth or FLOPs.",
        expected_gain=gain,
        gain_basis="time share x (1 - blocks / SMs) x 0.75: time scales with the SMs in use, discounted for the "
                   "data reuse smaller tiles give up",
        kernels=[k.name for k in hits],
    )]  # fmt: skip


@rule
def register_limited_occupancy(report: ProfileReport) -> list[Recommendation]:
    sms = report.sm_count or DEFAULT_SM_COUNT
    share = shares(report)
    hits = []
    for k in report.device_kernels():
        limit = k.occupancy_limiters.get("registers")
        binds = k.occupancy_limiter == "registers" and (k.theoretical_occupancy_pct or 100) < 50
        needed = (k.blocks or 0) / sms  # blocks each SM must hold at once for the limit to matter
        if binds and limit is not None and needed > limit and share.get(k.name, 0) >= 0.05:
            hits.append(k)
    if not hits:
        return []
    gain = sum(share[k.name] * (1 - (k.theoretical_occupancy_pct or 50) / 50) * 0.5 for k in hits)
    ev = []
    for k in hits:
        ev += [Evidence(metric="registers per thread", value=k.registers, good="<= 64-128", kernel=k.name),
               Evidence(metric="theoretical occupancy", value=_pct(k.theoretical_occupancy_pct), good=">= 50%", kernel=k.name),
               Evidence(metric="blocks per SM allowed by registers", value=k.occupancy_limiters.get("registers"), kernel=k.name)]  # fmt: skip
    return [recommendation(
        rule="register_limited_occupancy",
        title="Cut registers per thread to raise occupancy",
        evidence=ev,
        action="Shrink per-thread state: smaller tiles per program (BLOCK_M/BLOCK_N/BLOCK_K), fewer pipeline stages, "
               "recompute cheap values instead of keeping them live; in CUDA use __launch_bounds__ or "
               "-maxrregcount. Check spills after the change.",
        expected_gain=gain,
        gain_basis="time share x (1 - theoretical occupancy / 50%) x 0.5",
        kernels=[k.name for k in hits],
    )]  # fmt: skip


@rule
def uncoalesced_access(report: ProfileReport) -> list[Recommendation]:
    share = shares(report)
    hits, gain, ev = [], 0.0, []
    for k in report.device_kernels():
        parts = [(k.global_load_sectors, k.global_load_bytes_per_sector), (k.global_store_sectors, k.global_store_bytes_per_sector)]
        total = sum(s for s, b in parts if s and b is not None)
        wasted = sum(s * (1 - min(b, 32) / 32) for s, b in parts if s and b is not None)
        if total <= 0 or wasted / total < 0.2 or share.get(k.name, 0) < 0.05:
            continue
        mem_bound = (k.memory_throughput_pct or 0) >= (k.sm_throughput_pct or 0)
        gain += share[k.name] * (wasted / total) * (1.0 if mem_bound else 0.5)
        hits.append(k)
        ev += [Evidence(metric="useful bytes per 32-byte sector (loads)", value=k.global_load_bytes_per_sector, good="32", kernel=k.name),
               Evidence(metric="useful bytes per 32-byte sector (stores)", value=k.global_store_bytes_per_sector, good="32", kernel=k.name),
               Evidence(metric="sectors per request (loads)", value=k.global_load_sectors_per_request,
                        good="4 for 4-byte elements, 16 for 16-byte vectors", kernel=k.name),
               Evidence(metric="wasted sector fraction", value=round(wasted / total, 3), good="0", kernel=k.name)]  # fmt: skip
    if not hits:
        return []
    return [recommendation(
        rule="uncoalesced_access",
        title="Coalesce global memory accesses",
        evidence=ev,
        action="Make consecutive threads (the fastest tl.arange axis / threadIdx.x) touch consecutive addresses: put "
               "the contiguous dimension innermost, load 16-byte vectors (float4 / tl.load on a contiguous block), and "
               "for transposes stage a tile through shared memory and write it out row-wise.",
        expected_gain=gain,
        gain_basis="time share x wasted fraction of the sectors moved (halved where the kernel is not memory-bound)",
        kernels=[k.name for k in hits],
    )]  # fmt: skip


@rule
def use_tensor_cores(report: ProfileReport) -> list[Recommendation]:
    r = report.roofline
    if r is None or r.flops <= 0 or not report.device_ms_per_forward:
        return []
    idle = [k for k in report.device_kernels() if k.tensor_pipe_pct is not None and k.tensor_pipe_pct < 5]
    if not idle:
        return []
    from .roofline import lookup_peaks

    peaks, _ = lookup_peaks(r.device)
    fast = peaks.flops.get("tf32" if r.dtype == "fp32" else r.dtype)
    slow = peaks.flops.get("fp32")
    if not fast or not slow or fast <= slow:
        return []
    compute_ms = r.flops / slow * 1e3
    gain = compute_ms * (1 - slow / fast) / report.device_ms_per_forward
    ev = [Evidence(metric="tensor pipe active", value=_pct(k.tensor_pipe_pct), good="> 30% for a GEMM", kernel=k.name) for k in idle]
    ev += [Evidence(metric="FMA pipe active", value=_pct(k.fma_pipe_pct), kernel=k.name) for k in idle if k.fma_pipe_pct is not None]
    ev += [Evidence(metric="reference FLOPs per forward", value=r.flops),
           Evidence(metric="ms of those FLOPs at the fp32 (non-tensor) peak", value=round(compute_ms, 5)),
           Evidence(metric="device ms per forward", value=round(report.device_ms_per_forward, 5))]  # fmt: skip
    return [recommendation(
        rule="use_tensor_cores",
        title="Do the matrix products on tensor cores",
        evidence=ev,
        action="Use tl.dot on tiles (fp32 inputs with input_precision='tf32', or cast tiles to bf16/fp16 and "
               "accumulate in fp32); in CUDA use mma.sync/wgmma through CUTLASS/CuTe MMA atoms. Check the tolerance: "
               "tf32 keeps 10 mantissa bits.",
        expected_gain=gain,
        gain_basis=f"the FLOPs' time at the fp32 peak x (1 - fp32/{'tf32' if r.dtype == 'fp32' else r.dtype} peak) / "
                   "measured time: only the compute part shrinks",
        kernels=[k.name for k in idle],
    )]  # fmt: skip


@rule
def ncu_own_rules(report: ProfileReport, top: int = 3) -> list[Recommendation]:
    """Nsight Compute's own rule results (details page), weighted by the kernel's share of time and
    halved: ncu's estimates are per-kernel upper bounds and overlap one another."""
    share = shares(report)
    best: dict[str, tuple[float, object]] = {}
    for r in report.ncu_rules:
        if r.type != "OPT" or r.speedup_type != "global" or not r.speedup_pct or r.speedup_pct < 10:
            continue
        gain = r.speedup_pct / 100 * share.get(r.kernel, 0) * 0.5
        if gain > best.get(r.rule, (-1, None))[0]:
            best[r.rule] = (gain, r)
    out = []
    for gain, r in sorted(best.values(), key=lambda x: -x[0])[:top]:
        out.append(recommendation(
            rule=f"ncu:{r.rule}", title=f"Nsight Compute: {r.rule} ({r.section})",
            evidence=[Evidence(metric="ncu estimated speedup", value=f"{r.speedup_pct:.1f}% ({r.speedup_type})", kernel=r.kernel)],
            action=r.description, expected_gain=gain,
            gain_basis="ncu's estimated speedup x the kernel's time share x 0.5 (ncu estimates overlap)",
            kernels=[r.kernel],
        ))  # fmt: skip
    return out


def run_rules(report: ProfileReport, rules: list[Rule] | None = None) -> tuple[list[Recommendation], list[str]]:
    """Every rule's recommendations, best expected gain first; errors of a broken rule as notes."""
    recs, notes = [], []
    for fn in rules if rules is not None else RULES:
        try:
            recs += fn(report)
        except Exception as e:  # noqa: BLE001  (one broken rule must not lose the others' advice)
            notes.append(f"rule {fn.__name__} failed: {type(e).__name__}: {e}")
    rank = {"high": 0, "medium": 1, "low": 2}
    recs.sort(key=lambda r: (-r.expected_gain, rank[r.priority]))
    return recs, notes


# ---- Intel XVE counters (unitrace --metric-query) and device timelines (unitrace, xctrace) ----


@rule
def device_idle_gaps(report: ProfileReport) -> list[Recommendation]:
    """The device sat idle between kernels for a large part of the captured span."""
    t = report.timeline
    span, idle = t.get("span_ms", 0.0), t.get("idle_ms", 0.0)
    if span <= 0 or idle / span < 0.2 or not t.get("gaps"):
        return []
    per_fwd = report.launches_per_forward or 0
    ev = [Evidence(metric="device idle, % of the span", value=_pct(100 * idle / span), good="< 10%"),
          Evidence(metric="idle gaps between busy runs", value=int(t["gaps"]), good="0 inside a forward"),
          Evidence(metric="largest gap (ms)", value=round(t.get("largest_gap_ms", 0.0), 4)),
          Evidence(metric="dispatches per forward", value=round(per_fwd, 2), good="1 (one fused kernel)")]  # fmt: skip
    return [recommendation(
        rule="device_idle_gaps",
        title="Keep the GPU busy between dispatches",
        evidence=ev,
        action="The GPU waits on the host between kernels: fuse the forward's kernels into one dispatch, allocate "
               "outputs once outside the hot path, and avoid host round trips in forward (.item(), .cpu(), printing "
               "tensors, per-call compile_shader or recompiles). On Metal, dispatch every kernel of a forward from one "
               "library without synchronizing between them.",
        expected_gain=min(0.5, 0.8 * idle / span),
        gain_basis="idle fraction of the captured span x 0.8, capped at 0.5: gaps between forwards (the caller's "
                   "own loop) are in the span too and no kernel change removes them",
        kernels=[k.name for k in report.device_kernels()],
    )]  # fmt: skip


@rule
def xve_stalled(report: ProfileReport) -> list[Recommendation]:
    """Intel vector engines busy but stalled (waiting on memory or dependencies) much of the time."""
    share = shares(report)
    hits = [k for k in report.device_kernels()
            if k.metrics.get("xve_stall_pct", 0) >= 30 and share.get(k.name, 0) >= 0.05]  # fmt: skip
    if not hits:
        return []
    ev = []
    for k in hits:
        ev += [Evidence(metric="XVE stall", value=_pct(k.metrics["xve_stall_pct"]), good="< 20%", kernel=k.name),
               Evidence(metric="XVE active", value=_pct(k.metrics.get("xve_active_pct")), good="> 70%", kernel=k.name)]
        top = sorted(((n, v) for n, v in k.metrics.items() if n.startswith("xve_stall_") and n != "xve_stall_pct"),
                     key=lambda x: -x[1])[:2]  # fmt: skip
        ev += [Evidence(metric=n.removesuffix("_pct").replace("xve_stall_", "stall: "), value=_pct(v), kernel=k.name)
               for n, v in top]  # fmt: skip
        if "gpu_memory_gbps" in k.metrics:
            ev.append(Evidence(metric="GPU memory GB/s", value=round(k.metrics["gpu_memory_gbps"], 1), kernel=k.name))
    return [recommendation(
        rule="xve_stalled",
        title="Hide memory latency on the Intel vector engines",
        evidence=ev,
        action="The XVEs wait on loads (SBID / send stalls): keep more loads in flight per thread (larger BLOCK sizes, "
               "tl.make_block_ptr / 2D block loads, num_stages 2-3), load contiguous vectors along the fastest "
               "dimension, and reuse each loaded tile more (bigger GEMM tiles, grf_mode='large' when registers run out).",
        expected_gain=sum(share[k.name] * k.metrics["xve_stall_pct"] / 100 * 0.5 for k in hits),
        gain_basis="time share x stall fraction x 0.5: about half of the stalled cycles can be overlapped",
        kernels=[k.name for k in hits],
    )]  # fmt: skip


@rule
def xve_idle(report: ProfileReport) -> list[Recommendation]:
    """Intel vector engines idle: too few threads to fill them (small grid, low occupancy)."""
    share = shares(report)
    hits = [k for k in report.device_kernels()
            if k.metrics.get("xve_idle_pct", 0) >= 30 and share.get(k.name, 0) >= 0.05]  # fmt: skip
    if not hits:
        return []
    ev = []
    for k in hits:
        ev += [Evidence(metric="XVE idle", value=_pct(k.metrics["xve_idle_pct"]), good="< 10%", kernel=k.name),
               Evidence(metric="XVE thread occupancy", value=_pct(k.achieved_occupancy_pct), good="> 70%", kernel=k.name)]
        if "work_groups" in k.metrics:
            ev.append(Evidence(metric="work-groups", value=int(k.metrics["work_groups"]), kernel=k.name,
                               good="several per Xe-core (e.g. >= 4 x 20 on an Arc B580)"))  # fmt: skip
    return [recommendation(
        rule="xve_idle",
        title="Give the Intel GPU enough parallel work",
        evidence=ev,
        action="Many vector engines have no thread to run: launch more programs (smaller tiles per program, split "
               "long rows or split-K), and keep per-thread registers low enough for several hardware threads per XVE "
               "(fewer num_warps per program, or grf_mode='small' when the kernel does not spill).",
        expected_gain=sum(share[k.name] * k.metrics["xve_idle_pct"] / 100 * 0.6 for k in hits),
        gain_basis="time share x idle fraction x 0.6: filled engines take over most of the idle fraction",
        kernels=[k.name for k in hits],
    )]  # fmt: skip
