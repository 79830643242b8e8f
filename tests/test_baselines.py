"""Baselines kept warm in the worker (engine/baselines.py): the anchor timed with the candidate, the
other kept timings scaled by its move, all timed again when it moved far; the ``baselines`` job
that makes them ahead of a verify; and the cheaper seeding every timed call draws under."""

from __future__ import annotations

import contextlib
import random
import sys
import types

import pytest
import torch
from conftest import example, problem

from kforge_mcp.core.problem import seed_everything
from kforge_mcp.core.requests import BaselinesRequest, Done
from kforge_mcp.judge import baselines
from kforge_mcp.judge.device_guard import DeviceGuard
from kforge_mcp.judge.timing import precise, time_interleaved


class HostClock:
    """The host clock the CPU timing path reads, moved only by the Sleepers: each call takes exactly its
    set time, however loaded the machine is (a busy-wait on the real clock ran long whenever the
    scheduler took the core away, and a loaded 2-core machine then moved the medians past the bounds)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


CLOCK = HostClock()


@pytest.fixture
def host_clock(monkeypatch):
    monkeypatch.setattr(sys.modules[baselines.time_interleaved.__module__], "_perf_counter", CLOCK)


class Sleeper:
    """A callable that takes a set time on the host clock (the CPU timing path)."""

    def __init__(self, ms: float):
        self.ms = ms

    def __call__(self, *args):
        CLOCK.now += self.ms / 1e3


def verifier(cache: baselines.BaselineCache, shapes: tuple[str, ...] = ("8x8 float32",)) -> types.SimpleNamespace:
    """The parts of a Verifier the timing uses."""
    v = types.SimpleNamespace(
        cache=cache,
        req=types.SimpleNamespace(baselines=["eager", "compiled"], fresh_timing_inputs=True, timing_budget_s=1.0),
        device="cpu",
        device_name="cpu",
        timing_shapes=list(shapes),
        problem=types.SimpleNamespace(source=types.SimpleNamespace(digest="p")),
        judge=types.SimpleNamespace(dtype=None),
        progress=lambda _m: None,
        timing_feed=lambda: list,
        findings=[],
        guard=DeviceGuard("cpu"),
        phase=lambda _name: contextlib.nullcontext(),
        report=types.SimpleNamespace(phases={}),
    )
    v.finding = v.findings.append
    return v


@pytest.mark.usefixtures("host_clock")
def test_kept_baselines_are_scaled_by_the_anchor_and_timed_again_when_it_moves_far(tmp_path):
    cache, eager, compiled = baselines.BaselineCache(tmp_path), Sleeper(4.0), Sleeper(3.0)
    fns = {"candidate": Sleeper(2.0), "eager": eager, "compiled": compiled}
    check = ("candidate", 2, 0)

    first = verifier(cache)
    stats, _, _ = baselines.time_with_baselines(first, fns, 0.05, check)
    assert not first.findings and stats["eager"].median_ms == pytest.approx(4.0, rel=0.1)
    kept = cache.get(baselines.timing_key(first, ["eager", "compiled"]))
    assert kept is not None

    eager.ms, compiled.ms = 4.4, 30.0  # the host is 10% slower; compiled is not run again, so its 30 ms goes unseen
    again = verifier(cache)
    stats, samples, _ = baselines.time_with_baselines(again, fns, 0.05, check)
    assert [f.code for f in again.findings] == ["baselines_reused"]
    factor = again.findings[0].evidence["factor"]
    assert factor == pytest.approx(1.1, rel=0.05) and again.findings[0].evidence["scaled"] == ["compiled"]
    assert stats["eager"].median_ms == pytest.approx(4.4, rel=0.05)  # measured now, with the candidate
    assert stats["compiled"].median_ms == pytest.approx(kept.stats["compiled"].median_ms * factor, rel=1e-3)
    assert samples["compiled"] == pytest.approx([x * factor for x in kept.samples["compiled"]], rel=1e-3)
    assert stats["candidate"].median_ms == pytest.approx(2.0, rel=0.1)

    eager.ms = 8.0  # the device runs at half speed (clocks, a neighbour): a factor cannot stand for that
    moved = verifier(cache)
    stats, _, _ = baselines.time_with_baselines(moved, fns, 0.05, check)
    assert [f.code for f in moved.findings] == ["baselines_timed_again"]
    assert moved.findings[0].evidence["drift"] == pytest.approx(1.0, rel=0.15)
    assert stats["eager"].median_ms == pytest.approx(8.0, rel=0.1)
    assert stats["compiled"].median_ms == pytest.approx(30.0, rel=0.1)
    retimed = cache.get(baselines.timing_key(moved, ["eager", "compiled"]))
    assert retimed is not None and retimed.stats["eager"].median_ms == pytest.approx(8.0, rel=0.1)


class Uncompiled:
    """A compiled baseline that must not be made: its timing is kept."""

    def make(self):
        raise AssertionError("compiled although its timing was kept")


@pytest.mark.usefixtures("host_clock")
def test_kept_timings_outlive_the_worker_and_spare_the_compile_until_the_shapes_change(tmp_path):
    fns = {"candidate": Sleeper(1.0), "eager": Sleeper(2.0), "compiled": Sleeper(1.5)}
    baselines.time_with_baselines(verifier(baselines.BaselineCache(tmp_path)), fns, 0.02, ("candidate", 1, 0))

    restarted = verifier(baselines.BaselineCache(tmp_path))  # a new worker (or server) on the same home
    lazy = {**fns, "compiled": baselines._Pending(Uncompiled().make)}
    stats, _, _ = baselines.time_with_baselines(restarted, lazy, 0.02, ("candidate", 1, 0))
    assert [f.code for f in restarted.findings] == ["baselines_reused"]
    assert stats["compiled"].median_ms == pytest.approx(1.5, rel=0.1)

    other = verifier(baselines.BaselineCache(tmp_path), shapes=("16x8 float32",))  # another key: timed afresh
    baselines.time_with_baselines(other, fns, 0.02, ("candidate", 1, 0))
    assert not other.findings


def test_the_baselines_job_keeps_them_for_the_next_call(engine):
    request = BaselinesRequest(
        problem=engine.resolve_source(problem("fused_bias_gelu"), "problem"),
        target="triton",
        device="cpu",
        baselines=["eager"],
        timing_budget_s=0.05,
    )
    first = engine.executor.run("cpu", request, timeout_s=120)
    second = engine.executor.run("cpu", request, timeout_s=120)
    assert isinstance(first, Done) and isinstance(second, Done), (first, second)
    assert first.value["baselines"] == ["eager"] and not first.value["kept_already"] and second.value["kept_already"]


def test_a_verify_reports_where_its_time_went(engine):
    report = engine.verify(
        problem("fused_bias_gelu"), example("fused_bias_gelu", "triton"), target="triton", trials=1, baselines=["eager"]
    )
    assert report.verdict == "pass"
    assert {"load", "correctness", "timing"} <= set(report.phases)
    # each second once, but for a compile that ran beside the others (none here: eager alone)
    assert "baseline_compile_ahead" not in report.phases and sum(report.phases.values()) <= report.seconds


def test_seeding_draws_what_torch_manual_seed_draws():
    seed_everything(1234)
    ours = torch.randn(64), torch.rand(3, generator=None)
    torch.manual_seed(1234)
    assert all(torch.equal(a, b) for a, b in zip(ours, (torch.randn(64), torch.rand(3))))


class Noisy(Sleeper):
    """A call whose time jumps between two values at random after its warm-up (three calls at the low one): its
    median is not known after a few samples."""

    def __init__(self, low: float, high: float, seed: int):
        super().__init__(low)
        self.low, self.high, self.rng, self.calls = low, high, random.Random(seed), 0

    def __call__(self, *args):
        self.calls += 1
        self.ms = self.low if self.calls <= 3 else self.rng.choice((self.low, self.high))
        super().__call__(*args)


@pytest.mark.usefixtures("host_clock")
def test_timing_stops_once_the_speedup_is_known_and_not_before():
    def timed(candidate, eager):
        fns = {"candidate": candidate, "eager": eager}
        return time_interleaved(fns, "cpu", 0.1, feed=list, check=("candidate", 4, 0), enough=precise(["eager"]))

    steady_stats, _, steady_kept = timed(Sleeper(1.0), Sleeper(2.0))  # 100 calls each planned, in 5 rounds
    assert steady_stats["candidate"].samples <= 40 and len(steady_kept) == 4  # stopped after 2 of 5 rounds
    noisy_stats, _, noisy_kept = timed(Noisy(1.0, 3.0, 1), Noisy(2.0, 6.0, 2))
    assert noisy_stats["candidate"].samples >= 99 and len(noisy_kept) == 4  # every round (of about 100 calls)


def test_the_compile_ahead_leaves_the_judged_reference_s_buffers_alone(monkeypatch):
    """torch.compile of the reference starts beside the trials and runs it once; a training-mode BatchNorm's
    forward updates its running statistics, which the first trial compares with the candidate's. The compile
    runs a copy that shares the parameters and keeps its own buffers. (dynamo's own eager backend here: the
    subject is what the compile thread runs, not inductor's code.)"""
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model: real_compile(model, backend="eager"))
    reference = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).train()
    v = types.SimpleNamespace(
        req=types.SimpleNamespace(baselines=["eager", "compiled"], fresh_timing_inputs=True),
        cache=baselines.BaselineCache(),
        problem=types.SimpleNamespace(source=types.SimpleNamespace(digest="conv-bn")),
        device="cpu",
        device_name="cpu",
        judge=types.SimpleNamespace(dtype=None),
        timing_shapes=[(2, 3, 8, 8)],
        reference=reference,
    )
    before = {n: b.clone() for n, b in reference.named_buffers()}
    baselines.start_compile(v, [torch.randn(2, 3, 8, 8)])
    v.cache.settled()
    (compiled,) = v.cache.compiled.values()
    assert all(torch.equal(before[n], b) for n, b in reference.named_buffers()), "the reference's buffers moved"
    assert int(compiled._orig_mod[1].num_batches_tracked) == 1  # the copy ran, once
    assert compiled._orig_mod[0].weight is reference[0].weight  # the parameters are shared, not copied
