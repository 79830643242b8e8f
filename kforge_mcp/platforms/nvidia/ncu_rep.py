"""Nsight Compute's own report files (``.ncu-rep``), read through its ``ncu_report`` module: every
metric of every profiled kernel, the same KernelProfile as the CSV pages give."""

from __future__ import annotations

import math
from pathlib import Path

from kforge_mcp.core.profile import ProfileParseError, ProfileReport
from kforge_mcp.platforms.nvidia.ncu import finish_report, group_launches, kernel_from_launches, scaled


def import_ncu_report():
    """Nsight Compute's ``ncu_report`` module: importable as is, or found beside the ``ncu`` on PATH
    (<install>/extras/python), or under /usr/local/cuda*/nsight-compute*/ and /opt/nvidia."""
    try:
        import ncu_report

        return ncu_report
    except ImportError:
        pass
    import glob
    import importlib
    import shutil
    import sys

    roots = []
    exe = shutil.which("ncu")
    if exe:
        roots.append(Path(exe).resolve().parent)
    roots += [
        Path(p)
        for p in sorted(glob.glob("/usr/local/cuda*/nsight-compute*") + glob.glob("/opt/nvidia/nsight-compute/*"))
    ]
    for root in roots:
        extras = root / "extras" / "python"
        if (extras / "ncu_report.py").is_file():
            sys.path.insert(0, str(extras))
            try:
                return importlib.import_module("ncu_report")
            except ImportError:
                sys.path.remove(str(extras))
    return None


def _rep_string(action, name: str) -> str | None:
    try:
        metric = action.metric_by_name(name)
        return metric.as_string() if metric is not None else None
    except Exception:  # noqa: BLE001  (absent or not a string in this ncu version)
        return None


def report_from_ncu_rep(path: str | Path, forwards: int | None = None) -> ProfileReport:
    ncu_report = import_ncu_report()
    if ncu_report is None:
        raise ProfileParseError(
            f"{path}: reading .ncu-rep needs Nsight Compute's python module 'ncu_report' (in "
            "<nsight-compute>/extras/python; it is looked up beside the ncu on PATH), which is not available here; "
            "or export CSV with: ncu --import FILE.ncu-rep --csv --page raw > FILE.csv"
        )
    head = Path(path).read_bytes()[:64]
    try:
        ctx = ncu_report.load_report(str(path))
    except Exception as e:  # noqa: BLE001  (the module raises its own types; name the file and the cause)
        newer = "version" in str(e).lower() or "newer" in str(e).lower()
        raise ProfileParseError(
            f"{path}: Nsight Compute's ncu_report could not open it: {type(e).__name__}: {str(e)[:300]}"
            + (
                "; the report is likely from a newer Nsight Compute than the one here: export it where it was "
                "captured with `ncu --import FILE.ncu-rep --csv --page raw > FILE.csv`"
                if newer
                else ""
            )
            + ("" if head else "; the file is empty")
        ) from None
    if ctx is None or ctx.num_ranges() == 0:
        raise ProfileParseError(
            f"{path}: Nsight Compute's ncu_report read no ranges from it (truncated, or written by a "
            "newer Nsight Compute); export CSV where it was captured: ncu --import FILE.ncu-rep "
            "--csv --page raw > FILE.csv"
        )
    launches: list[dict] = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            metrics = {}
            for name in action.metric_names():
                metric = action.metric_by_name(name)
                try:
                    value = metric.as_double()
                except Exception:  # noqa: BLE001  (strings and instanced metrics)
                    continue
                unit = metric.unit() if hasattr(metric, "unit") else ""
                v = scaled(value, unit)
                if v is not None and not math.isnan(v):
                    metrics[name] = v
            launches.append(
                {
                    "id": str(len(launches)),
                    "name": action.name(),
                    "block": None,
                    "grid": None,
                    "metrics": metrics,
                    "device_name": _rep_string(action, "device__attribute_display_name"),
                    "cc": None,
                }
            )
    if not launches:
        raise ProfileParseError(f"{path}: the report holds no profiled kernels")
    groups = group_launches(launches)
    return finish_report(
        [kernel_from_launches(n, ls) for n, ls in groups.items()], launches, str(path), forwards, "ncu"
    )
