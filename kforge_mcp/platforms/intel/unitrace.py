"""Intel unitrace output (pti-gpu/tools/unitrace), for Triton on Intel XPU.

Two files:

- ``--chrome-kernel-logging`` (or ``--chrome-device-logging``): a chrome trace,
  ``{ "traceEvents":[ ... ] }``, whose device work are ``"ph": "X"`` events with
  ``"cat": "gpu_op"`` (``ts``/``dur`` in microseconds; the name carries the launch shape,
  ``kernel[SIMD32 {groups} {group size}]``, or ``Tile #N: `` under implicit scaling), host calls
  ``"cat": "cpu_op"``, and process names ``DEVICE<host>...`` for the device tracks.
- ``--metric-query`` (``-q``, group ComputeBasic by default): a CSV per device after a
  ``=== Device #N Metrics ===`` banner, header ``Kernel, GlobalInstanceId, GpuTime[ns], ...,
  XVE_ACTIVE[%], XVE_STALL[%], XVE_THREADS_OCCUPANCY_ALL[%], GPU_MEMORY_BYTE_READ[bytes], ...``,
  one row per kernel instance. Older GPUs name the XVE counters EU (EuActive[%], ...), the
  VectorEngineStalls group Xve* (XveActive[%], XveStallSbid[%], ...): all are read.

Launch geometry is kept in ``metrics`` (work_groups, work_group_size, simd_width), not in
grid/block: the SM-count rules are written for NVIDIA GPUs.
"""

from __future__ import annotations

import csv
import io
import re
from collections import OrderedDict
from typing import TypeGuard

from kforge_mcp.core.profile import KernelProfile, ProfileParseError, ProfileReport
from kforge_mcp.platforms.formats import MEMCPY_METRIC, busy_timeline, load_json, set_forwards

SHAPE = re.compile(r"\[SIMD(\d+)\s*\{\s*(\d+);\s*(\d+);\s*(\d+)\s*\}\s*\{\s*(\d+);\s*(\d+);\s*(\d+)\s*\}\s*\]\s*$")
TILE = re.compile(r"^Tile #\d+:\s*")
MEMORY_OPS = ("zeCommandListAppendMemory", "zeCommandListAppendBarrier", "clEnqueue")
LAUNCH_CALLS = (
    "zeCommandListAppendLaunchKernel",
    "zeCommandListAppendLaunchCooperativeKernel",
    "clEnqueueNDRangeKernel",
    "urEnqueueKernelLaunch",
)
# counter name (lower case, unit dropped) -> our metric name; XVE on Xe-HPC/Xe2, EU on older parts
COUNTERS = {
    "xve_active": "xve_active_pct",
    "xveactive": "xve_active_pct",
    "eu_active": "xve_active_pct",
    "euactive": "xve_active_pct",
    "xve_stall": "xve_stall_pct",
    "xvestall": "xve_stall_pct",
    "eu_stall": "xve_stall_pct",
    "eustall": "xve_stall_pct",
    "xve_threads_occupancy_all": "occupancy_pct",
    "euthreadoccupancy": "occupancy_pct",
    "xve_threads_occupancy": "occupancy_pct",
    "eu_threads_occupancy_all": "occupancy_pct",
    "gpu_memory_byte_read": "gpu_memory_bytes_read",
    "gpu_memory_byte_write": "gpu_memory_bytes_write",
    "l3_byte_read": "l3_bytes_read",
    "l3_byte_write": "l3_bytes_write",
    "xve_inst_executed_xmx_all_utilization": "xmx_utilization_pct",
    "xve_inst_executed_alu0_all_utilization": "alu0_utilization_pct",
    "xve_inst_executed_alu1_all_utilization": "alu1_utilization_pct",
    "xve_inst_executed_send_all_utilization": "send_utilization_pct",
}
STALL = re.compile(r"^xvestall(\w+)$")  # VectorEngineStalls: XveStallSbid[%], XveStallPipe[%], ...
SUMMED = ("gpu_memory_bytes_read", "gpu_memory_bytes_write", "l3_bytes_read", "l3_bytes_write")


def is_unitrace_trace(data) -> TypeGuard[dict]:
    events = data.get("traceEvents") if isinstance(data, dict) else None
    return isinstance(events, list) and any(isinstance(e, dict) and e.get("cat") == "gpu_op" for e in events)


def split_name(name: str) -> tuple[str, dict[str, float]]:
    """'Tile #0: add_kernel[SIMD32 {64; 1; 1} {256; 1; 1}]' -> ('add_kernel', launch shape)."""
    name = TILE.sub("", name.strip().strip('"'))
    m = SHAPE.search(name)
    if not m:
        return name, {}
    groups = int(m.group(2)) * int(m.group(3)) * int(m.group(4))
    size = int(m.group(5)) * int(m.group(6)) * int(m.group(7))
    return name[: m.start()].strip(), {"simd_width": int(m.group(1)), "work_groups": groups, "work_group_size": size}


def _finish(report: ProfileReport, forwards: int | None, path: str, what: str) -> ProfileReport:
    if not report.kernels:
        raise ProfileParseError(f"{path}: the unitrace {what} holds no kernels")
    set_forwards(report, forwards)
    for k in report.kernels:
        k.mean_ms = k.device_ms / k.launches if k.launches else 0.0
    if report.forwards_inferred and report.forwards is not None and report.forwards > 1:
        report.notes.append(f"{report.forwards} forwards inferred from launch counts (gcd)")
    return report


def report_from_chrome(data: dict | str, path: str = "<unitrace trace>", forwards: int | None = None) -> ProfileReport:
    if isinstance(data, str):
        data = load_json(data, path)
    if not is_unitrace_trace(data):
        raise ProfileParseError(f'{path}: not a unitrace chrome trace (no "cat": "gpu_op" device events)')
    report = ProfileReport(
        source="unitrace", device="xpu", execution="xpu", file=None if path.startswith("<") else path
    )
    kernels: OrderedDict[str, KernelProfile] = OrderedDict()
    spans, launch_us = [], 0.0
    for e in data["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        try:
            ts, dur = float(e.get("ts", 0)), float(e.get("dur", 0))
        except (TypeError, ValueError):
            raise ProfileParseError(f"{path}: event {e.get('name')!r} has a non-numeric ts or dur") from None
        name = str(e.get("name", "?"))
        if e.get("cat") == "cpu_op" and name.startswith(LAUNCH_CALLS):
            launch_us += dur
        if e.get("cat") != "gpu_op":
            continue
        base, shape = split_name(name)
        k = kernels.get(base)
        if k is None:
            k = kernels[base] = KernelProfile(name=base, metrics=dict(shape))
            if base.startswith(MEMORY_OPS):
                k.metrics[MEMCPY_METRIC] = 1.0
        k.launches += 1
        k.device_ms += dur / 1e3
        spans.append((ts, ts + dur))  # epoch microseconds: rebased below, before any float division
    report.kernels = list(kernels.values())
    for e in data["traceEvents"]:
        args = e.get("args") if isinstance(e, dict) else None
        if (
            e.get("name") == "process_name"
            and isinstance(args, dict)
            and str(args.get("name", "")).startswith("DEVICE<")
        ):
            report.notes.append(f"unitrace device track: {args['name']}")
            break
    _finish(report, forwards, path, "chrome trace")
    t0 = min(s for s, _ in spans) if spans else 0.0
    report.timeline = busy_timeline([((s - t0) / 1e3, (e - t0) / 1e3) for s, e in spans])
    if launch_us:
        assert report.forwards is not None  # _finish set it
        report.host_overhead_ms = launch_us / 1e3 / report.forwards
    return report


def _counter_key(header: str) -> str:
    return re.sub(r"\[.*?\]$", "", header.strip()).strip().lower()


def _csv_rows(text: str, path: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of every device section (banners and repeated headers dropped)."""
    header: list[str] | None = None
    rows = []
    for record in csv.reader(io.StringIO(text), skipinitialspace=True):
        cells = [c.strip() for c in record]
        if not cells or not any(cells) or cells[0].startswith("==="):
            continue
        if cells[0] == "Kernel":
            header = header or cells
            continue
        if header is None:
            raise ProfileParseError(
                f"{path}: unitrace metric CSV row before any 'Kernel, GlobalInstanceId, ...' header"
            )
        rows.append(cells)
    if header is None:
        raise ProfileParseError(f"{path}: no 'Kernel, ...' header: not a unitrace --metric-query CSV")
    return header, rows


def report_from_metrics_csv(text: str, path: str = "<unitrace metrics>", forwards: int | None = None) -> ProfileReport:
    header, rows = _csv_rows(text, path)
    keys = [_counter_key(h) for h in header]
    if "gputime" not in keys:
        raise ProfileParseError(
            f"{path}: the metric CSV has no GpuTime[ns] column (columns: {', '.join(header[:8])}, ...)"
        )
    t_at = keys.index("gputime")
    report = ProfileReport(
        source="unitrace", device="xpu", execution="xpu", file=None if path.startswith("<") else path
    )
    kernels: OrderedDict[str, KernelProfile] = OrderedDict()
    weighted: dict[str, dict[str, float]] = {}  # kernel -> metric -> sum(value * time)
    for n, row in enumerate(rows, start=1):
        if not row[0]:
            continue  # time-based samples outside any kernel
        if len(row) < len(header):
            raise ProfileParseError(f"{path}: data row {n} has {len(row)} cells, the header {len(header)}")
        try:
            t_ms = float(row[t_at]) / 1e6
        except ValueError:
            raise ProfileParseError(f"{path}: data row {n}: GpuTime[ns] is {row[t_at]!r}, not a number") from None
        base, shape = split_name(row[0])
        k = kernels.get(base)
        if k is None:
            k = kernels[base] = KernelProfile(name=base, metrics=dict(shape))
        k.launches += 1
        k.device_ms += t_ms
        acc = weighted.setdefault(base, {})
        for key, cell in zip(keys, row):
            stall = STALL.match(key)
            name = COUNTERS.get(key) or (f"xve_stall_{stall.group(1)}_pct" if stall else None)
            if name is None:
                continue
            try:
                value = float(cell)
            except ValueError:
                continue
            acc[name] = acc.get(name, 0.0) + (value if name in SUMMED else value * t_ms)
    for base, k in kernels.items():
        for name, total in weighted.get(base, {}).items():
            k.metrics[name] = total if name in SUMMED else (total / k.device_ms if k.device_ms else 0.0)
        m = k.metrics
        if "xve_active_pct" in m and "xve_stall_pct" in m:
            m["xve_idle_pct"] = max(0.0, 100.0 - m["xve_active_pct"] - m["xve_stall_pct"])
        k.achieved_occupancy_pct = m.get("occupancy_pct")
        k.dram_bytes_read, k.dram_bytes_write = m.get("gpu_memory_bytes_read"), m.get("gpu_memory_bytes_write")
        moved = (k.dram_bytes_read or 0) + (k.dram_bytes_write or 0)
        if moved and k.device_ms:
            m["gpu_memory_gbps"] = moved / (k.device_ms / 1e3) / 1e9
    report.kernels = list(kernels.values())
    return _finish(report, forwards, path, "metric CSV")


def looks_like_metrics_csv(text: str) -> bool:
    for line in text.lstrip().splitlines()[:5]:
        s = line.strip()
        if s.startswith("=== Device") or s.replace(" ", "").startswith("Kernel,GlobalInstanceId"):
            return True
    return False
