"""Triton proton profiles (``proton.start(name, hook="triton")`` -> NAME.hatchet, JSON):
a call tree whose leaves are kernels with count and time (ns), then a device-info object."""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeGuard

from kforge_mcp.core.profile import KernelProfile, ProfileParseError, ProfileReport
from kforge_mcp.platforms.formats import load_json, set_forwards


def is_hatchet(data) -> TypeGuard[list]:
    return isinstance(data, list) and bool(data) and isinstance(data[0], dict) and "frame" in data[0]


def report_from_hatchet(data: list | str, path: str = "<proton hatchet>", forwards: int | None = None) -> ProfileReport:
    if isinstance(data, str):
        data = load_json(data, path)
    if not is_hatchet(data):
        raise ProfileParseError(
            f"{path}: not a proton hatchet profile (expected a JSON list whose first item has 'frame')"
        )
    leaves: OrderedDict[str, list[float]] = OrderedDict()

    def walk(node: dict) -> None:
        children = node.get("children") or []
        metrics = node.get("metrics") or {}
        if not children and metrics.get("count"):
            name = (node.get("frame") or {}).get("name", "?")
            acc = leaves.setdefault(name, [0.0, 0.0, 0.0, 0.0])
            acc[0] += metrics.get("count", 0)
            acc[1] += metrics.get("time (ns)", 0) / 1e6
            acc[2] += metrics.get("flops", 0) or sum(v for k, v in metrics.items() if k.startswith("flops"))
            acc[3] += metrics.get("bytes", 0)
        for child in children:
            walk(child)

    walk(data[0])
    report = ProfileReport(source="proton", file=None if path.startswith("<") else path)
    for name, (count, ms, flops, nbytes) in leaves.items():
        k = KernelProfile(name=name, launches=int(count), device_ms=ms, mean_ms=ms / count if count else 0.0)
        if flops:
            k.metrics["flops"] = flops
        if nbytes:
            k.metrics["bytes"] = nbytes
        report.kernels.append(k)
    if not report.kernels:
        raise ProfileParseError(f"{path}: the proton profile holds no kernels (no leaf with a launch count)")
    set_forwards(report, forwards)
    info = data[1] if len(data) > 1 and isinstance(data[1], dict) else {}
    for kind, devs in info.items():
        if isinstance(devs, dict) and devs:
            first = next(iter(devs.values()))
            report.sm_count = first.get("num_sms")
            if first.get("arch"):
                report.device = f"sm_{first['arch']}"
                report.notes.append(f"{kind} arch sm_{first['arch']}; proton does not record the device name")
            break
    if report.forwards_inferred and report.forwards is not None and report.forwards > 1:
        report.notes.append(f"{report.forwards} forwards inferred from launch counts (gcd)")
    return report
