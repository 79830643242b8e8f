"""Time a callable the way the best harnesses do.

GPU: device events on the current stream, an L2 flush before each timed call, a
device-wide synchronize before reading the clock. CPU: the host monotonic clock.
Both: warm-up first, then as many calls as fit the budget, median and spread.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

from ..schemas import TimingStats

L2_FLUSH_BYTES = 256 * 1024 * 1024
_flush_buffers: dict[str, object] = {}


def summarize(samples_ms: list[float], clock: str) -> TimingStats:
    ordered = sorted(samples_ms)
    median = statistics.median(ordered)
    if len(ordered) >= 4:
        q = statistics.quantiles(ordered, n=4)
        iqr = q[2] - q[0]
    else:
        iqr = ordered[-1] - ordered[0]
    return TimingStats(
        median_ms=median,
        mean_ms=statistics.fmean(ordered),
        min_ms=ordered[0],
        max_ms=ordered[-1],
        iqr_ms=iqr,
        spread=iqr / median if median > 0 else 0.0,
        samples=len(ordered),
        clock=clock,
    )


def _device_api(device: str):
    import torch

    kind = device.split(":")[0]
    return {"cuda": getattr(torch, "cuda", None), "xpu": getattr(torch, "xpu", None)}.get(kind)


def time_callable(fn: Callable[[], object], device: str, budget_s: float = 1.0, min_calls: int = 3,
                  max_calls: int = 200, warmup_calls: int = 1) -> TimingStats:  # fmt: skip
    api = _device_api(device)
    if api is None:
        return _time_host(fn, budget_s, min_calls, max_calls, warmup_calls)
    return _time_device(fn, device, api, budget_s, min_calls, max_calls, warmup_calls)


def _time_host(fn, budget_s, min_calls, max_calls, warmup_calls) -> TimingStats:
    for _ in range(warmup_calls):
        fn()  # first calls pay for compiles and caches: never timed
    samples = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < max_calls and (len(samples) < min_calls or time.perf_counter() < deadline):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return summarize(samples, "host monotonic clock")


def _time_device(fn, device, api, budget_s, min_calls, max_calls, warmup_calls) -> TimingStats:
    import torch

    flush = _flush_buffers.get(device)
    if flush is None:
        flush = _flush_buffers[device] = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    for _ in range(warmup_calls):
        fn()  # first calls pay for compiles and caches: never timed
    api.synchronize()
    started = time.perf_counter()
    for _ in range(3):
        fn()
    api.synchronize()
    per_call = max((time.perf_counter() - started) / 3, 1e-6)
    calls = int(min(max_calls * 5, max(min_calls * 10, budget_s / per_call)))
    starts = [api.Event(enable_timing=True) for _ in range(calls)]
    ends = [api.Event(enable_timing=True) for _ in range(calls)]
    for i in range(calls):
        flush.zero_()  # evict the inputs from L2 so every call pays for its memory traffic
        starts[i].record()
        fn()
        ends[i].record()
    api.synchronize()
    samples = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return summarize(samples, f"{device.split(':')[0]} events, L2 flushed")
