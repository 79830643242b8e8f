"""Time callables the way the best harnesses do, and say how far to trust the result.

GPU: device events on the current stream, an L2 flush before each timed call, a
device-wide synchronize before reading the results. CPU: the host monotonic clock.
Candidate and baselines are timed in interleaved rounds, so a clock that drifts (boost,
thermal, a neighbour's load) moves all of them alike and the speedup stays put. The
speedup comes with a bootstrap confidence interval over the samples.

Timing stops early, at the end of a round, once the speedup is known well enough: its 95% interval within
PRECISION of the speedup itself, after at least MIN_ROUNDS rounds (``precise``). A slow kernel timed a thousand
times says little more than timed two hundred times, and the budget is a ceiling, not a quota.

The clocks are bound here at import, before any candidate runs, so a candidate that
patches ``time.perf_counter`` cannot change what we read (it is also reported).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

from kforge_mcp.core.schemas import TimingStats
from kforge_mcp.devices.device import get_device

BOOTSTRAP_RESAMPLES = 1000
PRECISION = 0.01  # timing may stop once the speedup's 95% interval lies within 1% of it
MIN_ROUNDS = 2  # and not before this many interleaved rounds (each has every callable timed)
_perf_counter = time.perf_counter


def summarize(samples_ms: list[float], clock: str) -> TimingStats:
    ordered = sorted(samples_ms)
    median = statistics.median(ordered)
    if len(ordered) >= 4:
        q = statistics.quantiles(ordered, n=4)
        iqr = q[2] - q[0]
    else:
        iqr = ordered[-1] - ordered[0]
    mean = statistics.fmean(ordered)
    return TimingStats(
        median_ms=median,
        mean_ms=mean,
        min_ms=ordered[0],
        max_ms=ordered[-1],
        iqr_ms=iqr,
        spread=iqr / median if median > 0 else 0.0,
        samples=len(ordered),
        clock=clock,
        cv=statistics.pstdev(ordered) / mean if mean > 0 else 0.0,
    )


def _device_api(device: str):
    """(module, Event class, synchronize) for a device, bound the first time it is asked for."""
    return get_device(device).api()


def sync_device(device: str) -> None:
    """Wait for everything queued on ``device`` (nothing to wait for on the CPU)."""
    get_device(device).synchronize()


def bind_device_clocks(device: str) -> None:
    """Bind the device's event class and synchronize before candidate code is imported."""
    get_device(device).bind_clocks()


class Sampler:
    """Collects timed samples of one callable, a batch at a time. With a ``feed``, every call
    gets fresh inputs from it, drawn before the clock starts; the calls whose index is in
    ``keep`` also leave a copy of their inputs and of their output (made after the clock stopped)
    in ``kept``, for a check against the reference."""

    def __init__(self, fn: Callable[..., object], device: str, feed: Callable[[], list] | None = None, keep=()):
        self.fn, self.device, self.feed, self.keep = fn, device, feed, set(keep)
        self.samples: list[float] = []
        self.kept: list[tuple[list, object]] = []
        self.calls = 0  # timed calls so far: the index ``keep`` refers to
        dev = self.dev = get_device(device)
        self.host_s = 0.0  # how long a call takes the host to queue its work
        api, self.event_cls, self.sync = dev.api()
        self.on_device = api is not None
        self.clock = dev.clock()
        if self.on_device:
            self.flush = dev.flush_buffer()

    def args(self) -> tuple[list, list | None]:
        """This call's inputs, and a copy of them when the call is one to check."""
        inputs = self.feed() if self.feed is not None else []
        return inputs, (_copy(inputs) if self.calls in self.keep else None)

    def warm_up(self, calls: int) -> float:
        """Run ``calls`` untimed calls (compiles, caches); return the time per call after them."""
        for _ in range(calls):
            self.fn(*self.args()[0])
        if self.on_device:
            self.sync()
        inputs = self.args()[0]
        if self.on_device:
            self.sync()
        t0 = _perf_counter()
        self.fn(*inputs)
        self.host_s = _perf_counter() - t0
        if self.on_device:
            self.sync()
        return max(_perf_counter() - t0, 1e-7)

    def _kept(self, saved: list | None, out) -> None:
        if saved is not None:
            self.kept.append((saved, _copy(out)))
        self.calls += 1

    def batch(self, calls: int) -> None:
        if not self.on_device:
            for _ in range(calls):
                inputs, saved = self.args()
                t0 = _perf_counter()
                out = self.fn(*inputs)
                self.samples.append((_perf_counter() - t0) * 1e3)
                self._kept(saved, out)
            return
        starts = [self.event_cls(enable_timing=True) for _ in range(calls)]
        ends = [self.event_cls(enable_timing=True) for _ in range(calls)]
        for i in range(calls):
            inputs, saved = self.args()  # queued before the start event: not timed
            self.flush.zero_()  # evict the inputs from L2 so every call pays for its memory traffic
            # Drawing fresh inputs costs the host more than the device, so the device would wait at the
            # start event while the host queues the call, and count the host's time; keep it busy instead.
            self.dev.spin(2 * self.host_s)
            starts[i].record()
            out = self.fn(*inputs)
            ends[i].record()
            self._kept(saved, out)  # the copy is queued after the end event
        self.sync()
        self.samples += [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _copy(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return [_copy(v) for v in value]
    return value


def time_interleaved(
    fns: dict[str, Callable[..., object]],
    device: str,
    budget_s: float = 1.0,
    rounds: int = 5,
    min_calls: int = 3,
    max_calls: int = 1000,
    warmup_calls: int = 2,
    feed: Callable[[], list] | None = None,
    check: tuple[str, int, int] | None = None,
    shares: dict[str, float] | None = None,
    settle: dict[str, Callable[[], None]] | None = None,
    enough: Callable[[dict[str, list[float]]], bool] | None = None,
) -> tuple[dict[str, TimingStats], dict[str, list[float]], list]:
    """Time each callable in ``rounds`` interleaved batches; each gets about ``budget_s``.
    ``feed``: fresh inputs for every call (the callables take them as arguments). ``check``:
    (name, how many, seed): that many of ``name``'s timed calls, chosen at random once the number
    of calls is known (among those of the first MIN_ROUNDS rounds where ``enough`` may stop it), keep their
    inputs and output. ``shares``: a callable's budget (and call cap) as a share of the others' (default 1).
    ``settle``: called after each warm-up and batch of that name, before any other callable runs (the
    candidate's: put back device state it changed). ``enough``: asked of the samples after each round from
    MIN_ROUNDS on; True stops the timing there. Returns the statistics, the raw samples (ms) per name and the kept
    (inputs, output) pairs."""
    samplers = {name: Sampler(fn, device, feed) for name, fn in fns.items()}
    after = settle or {}
    per_call = {}
    for name, s in samplers.items():
        per_call[name] = s.warm_up(warmup_calls)
        if name in after:
            after[name]()
    share = shares or {}
    calls = {
        name: int(min(max_calls * share.get(name, 1.0), max(min_calls, budget_s * share.get(name, 1.0) / t)))
        for name, t in per_call.items()
    }
    rounds = max(1, min(rounds, min(calls.values())))

    def in_round(name: str, r: int) -> int:
        return calls[name] // rounds + (1 if r < calls[name] % rounds else 0)

    if check is not None and check[0] in samplers:
        name, count, seed = check
        sure = calls[name] if enough is None else sum(in_round(name, r) for r in range(min(MIN_ROUNDS, rounds)))
        samplers[name].keep = set(random.Random(seed).sample(range(sure), min(count, sure)))
    for r in range(rounds):
        for name, sampler in samplers.items():
            if in_round(name, r):
                sampler.batch(in_round(name, r))
                if name in after:
                    after[name]()
        if (
            enough is not None
            and r + 1 >= MIN_ROUNDS
            and r + 1 < rounds
            and enough({name: s.samples for name, s in samplers.items()})
        ):
            break
    stats = {name: summarize(s.samples, s.clock) for name, s in samplers.items()}
    kept = samplers[check[0]].kept if check is not None and check[0] in samplers else []
    return stats, {name: s.samples for name, s in samplers.items()}, kept


def precise(baselines: list[str], candidate: str = "candidate") -> Callable[[dict[str, list[float]]], bool]:
    """``enough`` for time_interleaved: the speedup of ``candidate`` over each of ``baselines`` is known within
    PRECISION."""

    def known(b: list[float], c: list[float]) -> bool:
        if not b or not c or statistics.median(c) <= 0:
            return False
        low, high = speedup_interval(b, c)
        speedup = statistics.median(b) / statistics.median(c)
        return speedup > 0 and (high - low) / 2 <= PRECISION * speedup

    return lambda samples: bool(baselines) and all(known(samples[b], samples[candidate]) for b in baselines)


def speedup_interval(baseline_ms: list[float], candidate_ms: list[float], seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of median(baseline) / median(candidate)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    b = np.asarray(baseline_ms)[rng.integers(0, len(baseline_ms), (BOOTSTRAP_RESAMPLES, len(baseline_ms)))]
    c = np.asarray(candidate_ms)[rng.integers(0, len(candidate_ms), (BOOTSTRAP_RESAMPLES, len(candidate_ms)))]
    ratios = np.median(b, axis=1) / np.maximum(np.median(c, axis=1), 1e-12)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(low), float(high)
