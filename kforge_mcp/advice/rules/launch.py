"""How work is launched: too many kernels per forward, too few programs for the SMs, and kernels
that are latency-bound (idle issue slots, warps stalled on memory, neither memory nor compute
busy). Occupancy is advice only here, for latency-bound kernels that are not tensor-core GEMMs.
Also Nsight Compute's own rule results, when the details page carries them.
"""

from __future__ import annotations

from kforge_mcp.advice.rules.base import DEFAULT_SM_COUNT, ev, hot_kernels, recommendation, rule, shares
from kforge_mcp.advice.rules.base import pct as _pct
from kforge_mcp.advice.rules.memory import memory_pathology
from kforge_mcp.profiling.report import Evidence, ProfileReport, Recommendation

LATENCY_ISSUE_PCT = 60.0  # issue slots busy below this, with warps stalled: latency-bound
BUSY_UNIT_PCT = 60.0  # ... and neither memory nor SM throughput above this
TARGET_PCT = 80.0  # a latency-bound kernel with enough bytes in flight reaches ~80% of its busiest unit
MIN_KERNEL_MS = 0.01  # under ~10 us a launch's ramp-up and tail dominate its utilisation figures


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
    ev = [
        Evidence(metric="launches per forward", value=round(per_fwd, 2), good="1 (one fused kernel)"),
        Evidence(metric="distinct kernels", value=len(ks), good="1"),
        Evidence(metric="device ms per forward", value=round(total, 5)),
    ]
    ev += [Evidence(metric="mean ms per launch", value=round(k.mean_ms, 5), kernel=k.name) for k in ks[:6]]
    if report.host_overhead_ms is not None:
        ev.append(
            Evidence(
                metric="host ms launching kernels per forward",
                value=round(report.host_overhead_ms, 4),
                good="well under the device time",
            )
        )
    return [
        recommendation(
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
        )
    ]


@rule
def latency_bound(report: ProfileReport) -> list[Recommendation]:
    hits, gain, evidence, causes = [], 0.0, [], []
    sms = report.sm_count or DEFAULT_SM_COUNT
    for k, share in hot_kernels(report):
        if k.category in ("gemm", "conv") and k.compute_path and k.compute_path != "fma":
            continue  # a tensor-core GEMM at low occupancy is normal
        if k.blocks is not None and k.blocks < sms:
            continue  # idle SMs, not latency: grid_too_small speaks for it
        if memory_pathology(k):
            continue  # atomics, spills, bank conflicts or wasted sectors cause the stalls: their rules speak
        warps = k.warps_per_block
        busy = max(k.memory_throughput_pct or 0.0, k.sm_throughput_pct or 0.0)
        if k.issue_active_pct is not None:
            if k.issue_active_pct >= LATENCY_ISSUE_PCT or busy >= BUSY_UNIT_PCT or k.mean_ms < MIN_KERNEL_MS:
                continue
            gain += share * (1 - busy / TARGET_PCT)
            evidence += [
                ev("issue slots busy", _pct(k.issue_active_pct), f">= {LATENCY_ISSUE_PCT:g}%", k.name),
                ev("busiest of memory / SM throughput", _pct(busy), f"~{TARGET_PCT:g}%", k.name),
            ]
        elif warps is not None and warps < 4:  # a trace without metrics: the launch shape alone
            mem = (k.memory_throughput_pct or 0) / 100
            gain += share * (1 - warps / 4) * (1 - mem)
        else:
            continue
        hits.append(k.name)
        if warps is not None:
            evidence.append(ev("warps per block", warps, ">= 4 (128+ threads)", k.name))
        if k.achieved_occupancy_pct is not None:
            evidence.append(ev("achieved occupancy", _pct(k.achieved_occupancy_pct), ">= 25%", k.name))
        if k.theoretical_occupancy_pct is not None and k.theoretical_occupancy_pct < 100:
            evidence.append(
                ev(
                    "theoretical occupancy",
                    _pct(k.theoretical_occupancy_pct),
                    f"limited by {k.occupancy_limiter or '?'}",
                    k.name,
                )
            )
        if k.top_stalls:
            s = k.top_stalls[0]
            evidence.append(ev(f"top stall: {s.reason}", s.cycles_per_issue, "few cycles per issue", k.name))
        if warps is not None and warps < 4:
            causes.append("few_warps")
        elif k.occupancy_limiter == "registers" and (k.theoretical_occupancy_pct or 100) < 50:
            causes.append("registers")
        else:
            causes.append("ilp")
    if not hits:
        return []
    actions = {
        "few_warps": "Launch with num_warps=4 or 8 (Triton) / 128-256 threads per block (CUDA) and give each program "
        "a whole row or a larger BLOCK (triton.next_power_of_2(n_cols)) instead of a 1-warp loop over chunks: with "
        "one warp per block an SM holds at most 32 warps and each warp stalls on every global load.",
        "registers": "Registers cap occupancy: shrink per-thread state (smaller tiles per program, fewer pipeline "
        "stages, recompute cheap values) or use __launch_bounds__; check spills after the change.",
        "ilp": "Put more bytes in flight per thread: 16-byte vector loads, several independent loads before their "
        "first use (unroll, num_stages 2-3), and one pass over the data instead of several.",
    }
    return [
        recommendation(
            rule="latency_bound",
            title="Hide memory latency: more warps and more loads in flight",
            evidence=evidence,
            action=" ".join(actions[c] for c in dict.fromkeys(causes)),
            expected_gain=gain,
            gain_basis="time share x (1 - busiest unit / 80%): a latency-bound kernel speeds up until its busiest "
            "unit saturates (from the launch shape alone: share x (1 - warps/4) x (1 - memory throughput))",
            kernels=hits,
        )
    ]


@rule
def grid_too_small(report: ProfileReport) -> list[Recommendation]:
    sms = report.sm_count or DEFAULT_SM_COUNT
    share = shares(report)
    hits = [
        k
        for k in report.device_kernels()
        if k.blocks is not None and k.blocks < sms and share.get(k.name, 0) >= 0.05 and k.mean_ms >= MIN_KERNEL_MS
    ]  # under ~10 us a launch costs the same whatever the grid
    if not hits:
        return []
    gain = sum(share[k.name] * (1 - k.blocks / sms) * 0.75 for k in hits)
    ev = [
        Evidence(metric="blocks in the grid", value=k.blocks, good=f">= {sms} (one per SM)", kernel=k.name)
        for k in hits
    ]
    ev.append(Evidence(metric="SMs", value=sms, good="" if report.sm_count else "assumed (H100)"))
    return [
        recommendation(
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
        )
    ]


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
        out.append(
            recommendation(
                rule=f"ncu:{r.rule}",
                title=f"Nsight Compute: {r.rule} ({r.section})",
                evidence=[
                    Evidence(
                        metric="ncu estimated speedup",
                        value=f"{r.speedup_pct:.1f}% ({r.speedup_type})",
                        kernel=r.kernel,
                    )
                ],
                action=r.description,
                expected_gain=gain,
                gain_basis="ncu's estimated speedup x the kernel's time share x 0.5 (ncu estimates overlap)",
                kernels=[r.kernel],
            )
        )
    return out
