"""Device timelines (unitrace, xctrace) and Intel XVE counters (unitrace --metric-query)."""

from __future__ import annotations

from kforge_mcp.advice.rules.base import pct as _pct
from kforge_mcp.advice.rules.base import recommendation, rule, shares
from kforge_mcp.profiling.report import Evidence, ProfileReport, Recommendation


@rule
def device_idle_gaps(report: ProfileReport) -> list[Recommendation]:
    """The device sat idle between kernels for a large part of the captured span."""
    t = report.timeline
    span, idle = t.get("span_ms", 0.0), t.get("idle_ms", 0.0)
    if span <= 0 or idle / span < 0.2 or not t.get("gaps"):
        return []
    per_fwd = report.launches_per_forward or 0
    ev = [
        Evidence(metric="device idle, % of the span", value=_pct(100 * idle / span), good="< 10%"),
        Evidence(metric="idle gaps between busy runs", value=int(t["gaps"]), good="0 inside a forward"),
        Evidence(metric="largest gap (ms)", value=round(t.get("largest_gap_ms", 0.0), 4)),
        Evidence(metric="dispatches per forward", value=round(per_fwd, 2), good="1 (one fused kernel)"),
    ]
    return [
        recommendation(
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
        )
    ]


@rule
def xve_stalled(report: ProfileReport) -> list[Recommendation]:
    """Intel vector engines busy but stalled (waiting on memory or dependencies) much of the time."""
    share = shares(report)
    hits = [
        k for k in report.device_kernels() if k.metrics.get("xve_stall_pct", 0) >= 30 and share.get(k.name, 0) >= 0.05
    ]
    if not hits:
        return []
    ev = []
    for k in hits:
        ev += [
            Evidence(metric="XVE stall", value=_pct(k.metrics["xve_stall_pct"]), good="< 20%", kernel=k.name),
            Evidence(metric="XVE active", value=_pct(k.metrics.get("xve_active_pct")), good="> 70%", kernel=k.name),
        ]
        top = sorted(
            ((n, v) for n, v in k.metrics.items() if n.startswith("xve_stall_") and n != "xve_stall_pct"),
            key=lambda x: -x[1],
        )[:2]
        ev += [
            Evidence(metric=n.removesuffix("_pct").replace("xve_stall_", "stall: "), value=_pct(v), kernel=k.name)
            for n, v in top
        ]
        if "gpu_memory_gbps" in k.metrics:
            ev.append(Evidence(metric="GPU memory GB/s", value=round(k.metrics["gpu_memory_gbps"], 1), kernel=k.name))
    return [
        recommendation(
            rule="xve_stalled",
            title="Hide memory latency on the Intel vector engines",
            evidence=ev,
            action="The XVEs wait on loads (SBID / send stalls): keep more loads in flight per thread (larger BLOCK sizes, "
            "tl.make_block_ptr / 2D block loads, num_stages 2-3), load contiguous vectors along the fastest "
            "dimension, and reuse each loaded tile more (bigger GEMM tiles, grf_mode='large' when registers run out).",
            expected_gain=sum(share[k.name] * k.metrics["xve_stall_pct"] / 100 * 0.5 for k in hits),
            gain_basis="time share x stall fraction x 0.5: about half of the stalled cycles can be overlapped",
            kernels=[k.name for k in hits],
        )
    ]


@rule
def xve_idle(report: ProfileReport) -> list[Recommendation]:
    """Intel vector engines idle: too few threads to fill them (small grid, low occupancy)."""
    share = shares(report)
    hits = [
        k for k in report.device_kernels() if k.metrics.get("xve_idle_pct", 0) >= 30 and share.get(k.name, 0) >= 0.05
    ]
    if not hits:
        return []
    ev = []
    for k in hits:
        ev += [
            Evidence(metric="XVE idle", value=_pct(k.metrics["xve_idle_pct"]), good="< 10%", kernel=k.name),
            Evidence(metric="XVE thread occupancy", value=_pct(k.achieved_occupancy_pct), good="> 70%", kernel=k.name),
        ]
        if "work_groups" in k.metrics:
            ev.append(
                Evidence(
                    metric="work-groups",
                    value=int(k.metrics["work_groups"]),
                    kernel=k.name,
                    good="several per Xe-core (e.g. >= 4 x 20 on an Arc B580)",
                )
            )
    return [
        recommendation(
            rule="xve_idle",
            title="Give the Intel GPU enough parallel work",
            evidence=ev,
            action="Many vector engines have no thread to run: launch more programs (smaller tiles per program, split "
            "long rows or split-K), and keep per-thread registers low enough for several hardware threads per XVE "
            "(fewer num_warps per program, or grf_mode='small' when the kernel does not spill).",
            expected_gain=sum(share[k.name] * k.metrics["xve_idle_pct"] / 100 * 0.6 for k in hits),
            gain_basis="time share x idle fraction x 0.6: filled engines take over most of the idle fraction",
            kernels=[k.name for k in hits],
        )
    ]
