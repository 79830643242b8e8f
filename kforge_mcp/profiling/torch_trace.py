"""torch.profiler chrome traces (``prof.export_chrome_trace``): device kernels with their launch
configuration (grid, block, registers per thread, shared memory, estimated occupancy), launches
per forward, and the host time spent launching; CPU ops when the trace holds no device work
(CPU runs, the Triton interpreter).
"""

from __future__ import annotations

from collections import OrderedDict

from kforge_mcp.core.profile import KernelProfile, ProfileParseError, ProfileReport
from kforge_mcp.platforms.formats import MEMCPY_METRIC, infer_forwards, load_json

FORWARD_MARK = "kforge::forward"
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CALLS = (
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaLaunchKernelExC",
    "hipLaunchKernel",
    "hipModuleLaunchKernel",
    "urEnqueueKernelLaunch",
    "zeCommandListAppendLaunchKernel",
    "cudaLaunchCooperativeKernel",
    "cuLaunchCooperativeKernel",
)
HOST_CATS = ("cuda_runtime", "cuda_driver", "runtime", "driver")


def report_from_trace(
    data: dict | str, path: str = "<torch trace>", forwards: int | None = None, cpu_ops_top: int = 15
) -> ProfileReport:
    if isinstance(data, str):
        data = load_json(data, path)
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ProfileParseError(f"{path}: not a torch.profiler chrome trace (no 'traceEvents' list)")
    events = [e for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    if not events:
        raise ProfileParseError(
            f"{path}: the trace holds no complete ('ph': 'X') events: nothing was profiled "
            "(was the profiler stopped before any op ran?)"
        )
    marks = [e for e in events if e.get("name") == FORWARD_MARK and e.get("cat") in ("user_annotation", "cpu_op")]
    props = data.get("deviceProperties") or []
    report = ProfileReport(source="torch.profiler", file=None if path.startswith("<") else path)
    if props:
        report.device_name = props[0].get("name")
        report.sm_count = props[0].get("numSms")

    groups: OrderedDict[str, list[dict]] = OrderedDict()
    for e in sorted((e for e in events if e.get("cat") in DEVICE_CATS), key=lambda e: e.get("ts", 0)):
        groups.setdefault(e.get("name", "?"), []).append(e)
    kernels = [_kernel(name, evs) for name, evs in groups.items()]

    if marks:
        n_forwards, report.forwards_inferred = len(marks), False
    elif forwards:
        n_forwards = forwards
    else:
        n_forwards, report.forwards_inferred = infer_forwards([k.launches for k in kernels]), True
    report.forwards = n_forwards

    if kernels:
        report.kernels = kernels
        for k in kernels:
            k.launches_per_forward = k.launches / n_forwards
        report.launches_per_forward = sum(k.launches for k in kernels) / n_forwards
        report.device_ms_per_forward = sum(k.device_ms for k in kernels) / n_forwards
        launch_us = sum(e.get("dur", 0) for e in events if e.get("cat") in HOST_CATS and e.get("name") in LAUNCH_CALLS)
        report.host_overhead_ms = launch_us / 1e3 / n_forwards
        if report.forwards_inferred and n_forwards > 1:
            report.notes.append(f"{n_forwards} forwards inferred from launch counts (gcd); no '{FORWARD_MARK}' marks")
    else:
        report.kernels = _cpu_ops(events, marks, cpu_ops_top, n_forwards)
        report.notes.append(
            "the trace holds no device kernels: CPU ops are reported instead (a CPU run, or "
            "Triton's interpreter, whose kernels run as Python and show up as unattributed time)"
        )
        if marks:
            report.host_overhead_ms = None
            report.device_ms_per_forward = None
    return report


def _kernel(name: str, evs: list[dict]) -> KernelProfile:
    args = evs[0].get("args") or {}
    durs = [float(e.get("dur", 0)) / 1e3 for e in evs]  # us -> ms
    occ = [
        a["est. achieved occupancy %"] for a in (e.get("args") or {} for e in evs) if "est. achieved occupancy %" in a
    ]
    k = KernelProfile(
        name=name,
        kind="device",
        launches=len(evs),
        device_ms=sum(durs),
        mean_ms=sum(durs) / len(durs),
        grid=args.get("grid"),
        block=args.get("block"),
        registers=args.get("registers per thread"),
        shared_bytes=args.get("shared memory"),
        achieved_occupancy_pct=sum(occ) / len(occ) if occ else None,
    )
    for key, label in (("blocks per SM", "blocks_per_sm"), ("warps per SM", "warps_per_sm")):
        if isinstance(args.get(key), (int, float)):
            k.metrics[label] = float(args[key])
    if evs[0].get("cat") != "kernel":
        k.metrics[MEMCPY_METRIC] = 1.0
    return k


def _cpu_ops(events: list[dict], marks: list[dict], top: int, n_forwards: int) -> list[KernelProfile]:
    """Top-level CPU ops (inside the forward marks when present), by inclusive time, plus the
    forward's time no op accounts for (Python: the Triton interpreter, glue)."""
    ops = sorted(
        (e for e in events if e.get("cat") == "cpu_op" and e.get("name") != FORWARD_MARK),
        key=lambda e: (e.get("ts", 0), -e.get("dur", 0)),
    )
    if marks:
        spans = [(m["ts"], m["ts"] + m.get("dur", 0)) for m in marks]
        ops = [e for e in ops if any(a <= e["ts"] <= b for a, b in spans)]
    top_level, end = [], -1.0
    for e in ops:
        if e["ts"] >= end:
            top_level.append(e)
            end = e["ts"] + e.get("dur", 0)
    groups: OrderedDict[str, list[float]] = OrderedDict()
    for e in top_level:
        groups.setdefault(e["name"], []).append(float(e.get("dur", 0)) / 1e3)
    kernels = [
        KernelProfile(
            name=n,
            kind="cpu",
            launches=len(d),
            device_ms=sum(d),
            mean_ms=sum(d) / len(d),
            launches_per_forward=len(d) / n_forwards,
        )
        for n, d in groups.items()
    ]
    if marks:
        unattributed = sum(m.get("dur", 0) for m in marks) / 1e3 - sum(k.device_ms for k in kernels)
        if unattributed > 0:
            kernels.append(
                KernelProfile(
                    name="<python in forward: Triton interpreter / glue>",
                    kind="cpu",
                    launches=len(marks),
                    device_ms=unattributed,
                    mean_ms=unattributed / len(marks),
                    launches_per_forward=1.0,
                )
            )
    kernels.sort(key=lambda k: -k.device_ms)
    return kernels[:top]
