"""Patched timers: the clocks timing reads, bound before the candidate runs and compared after."""

from __future__ import annotations

from typing import Any

from kforge_mcp.core.schemas import Finding

TIMER_NAMES = (
    "time.perf_counter",
    "time.monotonic",
    "time.time",
    "torch.cuda.synchronize",
    "torch.cuda.Event",
    "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize",
)


def _resolve(path: str):
    import importlib

    parts = path.split(".")
    obj: Any = importlib.import_module(parts[0])
    for part in parts[1:]:
        obj = getattr(obj, part, None)
    return obj


def timer_snapshot() -> dict[str, object]:
    return {name: _resolve(name) for name in TIMER_NAMES}


def patched_timers(before: dict[str, object]) -> Finding | None:
    changed = [name for name, obj in timer_snapshot().items() if obj is not before[name]]
    if not changed:
        return None
    return Finding(
        code="timer_patched",
        severity="suspicious",
        evidence={"patched": changed},
        message=f"the candidate replaced timing functions: {', '.join(changed)}",
    )
