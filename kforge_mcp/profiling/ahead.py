"""What a worker's first profile on a device would wait for, readied while the worker is idle after a verify: the
metrics profiler's program, a spare for the default metrics command (spare.py). A verify leaves torch.profiler
started in its worker already; the metrics profiler's program took 6.6-7.8 s from its launch to its model built in
a first profile after a verify on an H100, and the profile waited for it (bench/results/profile-phases)."""

from __future__ import annotations

from pathlib import Path

from kforge_mcp.core.settings import Settings
from kforge_mcp.devices.device import get_device
from kforge_mcp.profiling.capture import ProfileCache, profiled_environment, runner_argv


def ready_profilers(device: str, settings: Settings, cache: ProfileCache) -> dict[str, bool]:
    """``spare``: whether a program waits for the next metrics profile (launched now, or waiting already); False
    where no metrics profiler can run here or the setting is off."""
    profiler = get_device(device).platform.metrics_profiler()
    command = profiler.command(None) if profiler is not None and profiler.missing() is None else None
    if command is None or not settings.profile_spare_on:
        return {"spare": False}
    # the spec is written by the profile that takes the program: this one only stands in its place
    cache.spares.leave(command + runner_argv(Path("ahead-spec.json")), profiled_environment(), device)
    return {"spare": cache.spares.spare is not None}
