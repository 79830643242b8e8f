"""Device timelines (unitrace, xctrace) and Intel XVE counters (unitrace --metric-query)."""

from __future__ import annotations

from dataclasses import dataclass

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.rules.base import DEVICE_TIMELINE, RANKING, XVE_COUNTERS, Rule, Wording, recommendation, shares
from kforge_mcp.advice.rules.base import pct as _pct
from kforge_mcp.profiling.report import Evidence, ProfileReport, Recommendation


@dataclass(frozen=True)
class TimelineThresholds:
    idle_min: float = 0.2  # the device idle a fifth of the captured span (a choice)
    idle_recoverable: float = 0.8  # share of the idle time a fused, host-free forward wins back (a choice)
    idle_gain_cap: float = 0.5  # gaps between forwards (the caller's own loop) are in the span: never promise more
    xve_stall_pct: float = 30.0  # vector engines stalled this much of the time (a choice)
    xve_stall_recoverable: float = 0.5  # about half of the stalled cycles can be overlapped (a choice)
    xve_idle_pct: float = 30.0  # vector engines idle this much of the time (a choice)
    xve_idle_recoverable: float = 0.6  # filled engines take over most of the idle fraction (a choice)


TIMELINE = TimelineThresholds()
GAPS_WORDING = Wording(
    "The GPU waits on the host between kernels: fuse the forward's kernels into one dispatch, allocate outputs once "
    "outside the hot path, and avoid host round trips in forward (.item(), .cpu(), printing tensors, recompiles).",
    {
        "metal": "The GPU waits on the host between kernels: fuse the forward's kernels into one dispatch, allocate "
        "outputs once outside the hot path, avoid host round trips in forward (.item(), .cpu(), printing tensors, "
        "per-call compile_shader), and dispatch every kernel of a forward from one library without synchronizing "
        "between them.",
    },
)


def _device_idle_gaps(report: ProfileReport, t: TimelineThresholds) -> list[Recommendation]:
    """The device sat idle between kernels for a large part of the captured span."""
    line = report.timeline
    span, idle = line.get("span_ms", 0.0), line.get("idle_ms", 0.0)
    if span <= 0 or idle / span < t.idle_min or not line.get("gaps"):
        return []
    per_fwd = report.launches_per_forward or 0
    evidence = [
        Evidence(metric="device idle, % of the span", value=_pct(100 * idle / span), good="< 10%"),
        Evidence(metric="idle gaps between busy runs", value=int(line["gaps"]), good="0 inside a forward"),
        Evidence(metric="largest gap (ms)", value=round(line.get("largest_gap_ms", 0.0), 4)),
        Evidence(metric="dispatches per forward", value=round(per_fwd, 2), good="1 (one fused kernel)"),
    ]
    return [
        recommendation(
            rule="device_idle_gaps",
            title="Keep the GPU busy between dispatches",
            evidence=evidence,
            action=GAPS_WORDING.say(report.target),
            expected_gain=min(t.idle_gain_cap, t.idle_recoverable * idle / span),
            gain_basis=f"idle fraction of the captured span x {t.idle_recoverable:g}, capped at {t.idle_gain_cap:g}: "
            "gaps between forwards (the caller's own loop) are in the span too and no kernel change removes them",
            kernels=[k.name for k in report.device_kernels()],
        )
    ]


def _xve_stalled(report: ProfileReport, t: TimelineThresholds) -> list[Recommendation]:
    """Intel vector engines busy but stalled (waiting on memory or dependencies) much of the time."""
    engines = vocabulary.of(report).engine_counters
    share = shares(report)
    hits = [
        k
        for k in report.device_kernels()
        if k.metrics.get(engines.stall, 0) >= t.xve_stall_pct and share.get(k.name, 0) >= RANKING.min_share
    ]
    if not hits:
        return []
    evidence = []
    for k in hits:
        evidence += [
            Evidence(metric="XVE stall", value=_pct(k.metrics[engines.stall]), good="< 20%", kernel=k.name),
            Evidence(metric="XVE active", value=_pct(k.metrics.get(engines.active)), good="> 70%", kernel=k.name),
        ]
        top = sorted(
            ((n, x) for n, x in k.metrics.items() if n.startswith(engines.stall_reason_prefix) and n != engines.stall),
            key=lambda nx: -nx[1],
        )[:2]
        evidence += [
            Evidence(
                metric=n.removesuffix("_pct").replace(engines.stall_reason_prefix, "stall: "),
                value=_pct(x),
                kernel=k.name,
            )
            for n, x in top
        ]
        if engines.memory_gbps in k.metrics:
            evidence.append(
                Evidence(metric="GPU memory GB/s", value=round(k.metrics[engines.memory_gbps], 1), kernel=k.name)
            )
    return [
        recommendation(
            rule="xve_stalled",
            title="Hide memory latency on the Intel vector engines",
            evidence=evidence,
            action=XVE_STALL_WORDING.say(report.target),
            expected_gain=sum(share[k.name] * k.metrics[engines.stall] / 100 * t.xve_stall_recoverable for k in hits),
            gain_basis=f"time share x stall fraction x {t.xve_stall_recoverable:g}: about half of the stalled cycles "
            "can be overlapped",
            kernels=[k.name for k in hits],
        )
    ]


XVE_STALL_WORDING = Wording(
    "The XVEs wait on loads (SBID / send stalls): keep more loads in flight per thread (larger blocks, 2D block "
    "loads, a software pipeline of 2-3 stages), load contiguous vectors along the fastest dimension, and reuse each "
    "loaded tile more (bigger GEMM tiles, the large register file mode when registers run out).",
    {
        "triton": "The XVEs wait on loads (SBID / send stalls): keep more loads in flight per thread (larger BLOCK "
        "sizes, tl.make_block_ptr / 2D block loads, num_stages 2-3), load contiguous vectors along the fastest "
        "dimension, and reuse each loaded tile more (bigger GEMM tiles, grf_mode='large' when registers run out).",
    },
)
XVE_IDLE_WORDING = Wording(
    "Many vector engines have no thread to run: launch more work-groups (smaller tiles per work-group, split long "
    "rows or split-K), and keep per-thread registers low enough for several hardware threads per XVE (the small "
    "register file mode when the kernel does not spill).",
    {
        "triton": "Many vector engines have no thread to run: launch more programs (smaller tiles per program, split "
        "long rows or split-K), and keep per-thread registers low enough for several hardware threads per XVE "
        "(fewer num_warps per program, or grf_mode='small' when the kernel does not spill).",
    },
)


def _xve_idle(report: ProfileReport, t: TimelineThresholds) -> list[Recommendation]:
    """Intel vector engines idle: too few threads to fill them (small grid, low occupancy)."""
    engines = vocabulary.of(report).engine_counters
    share = shares(report)
    hits = [
        k
        for k in report.device_kernels()
        if k.metrics.get(engines.idle, 0) >= t.xve_idle_pct and share.get(k.name, 0) >= RANKING.min_share
    ]
    if not hits:
        return []
    evidence = []
    for k in hits:
        evidence += [
            Evidence(metric="XVE idle", value=_pct(k.metrics[engines.idle]), good="< 10%", kernel=k.name),
            Evidence(metric="XVE thread occupancy", value=_pct(k.achieved_occupancy_pct), good="> 70%", kernel=k.name),
        ]
        if engines.work_groups in k.metrics:
            evidence.append(
                Evidence(
                    metric="work-groups",
                    value=int(k.metrics[engines.work_groups]),
                    kernel=k.name,
                    good="several per Xe-core (e.g. >= 4 x 20 on an Arc B580)",
                )
            )
    return [
        recommendation(
            rule="xve_idle",
            title="Give the Intel GPU enough parallel work",
            evidence=evidence,
            action=XVE_IDLE_WORDING.say(report.target),
            expected_gain=sum(share[k.name] * k.metrics[engines.idle] / 100 * t.xve_idle_recoverable for k in hits),
            gain_basis=f"time share x idle fraction x {t.xve_idle_recoverable:g}: filled engines take over most of "
            "the idle fraction",
            kernels=[k.name for k in hits],
        )
    ]


device_idle_gaps = Rule("device_idle_gaps", _device_idle_gaps, TIMELINE, (DEVICE_TIMELINE,))
xve_stalled = Rule("xve_stalled", _xve_stalled, TIMELINE, (XVE_COUNTERS,), vendors=frozenset({"intel"}))
xve_idle = Rule("xve_idle", _xve_idle, TIMELINE, (XVE_COUNTERS,), vendors=frozenset({"intel"}))
