"""A new engine on a home that probed before answers list_targets from that probe at once, and only
when nothing the probe depends on has changed; a corrupt cache is a miss."""

from __future__ import annotations

import time

import pytest

from kforge_mcp.api import Engine
from kforge_mcp.runtime.probe_cache import ProbeCache

pytestmark = pytest.mark.slow  # each starts a worker (a few seconds on two cores)


def test_second_engine_answers_from_the_last_probe_then_refreshes(tmp_path):
    first = Engine(home=tmp_path)
    try:
        probed = first.list_targets()
    finally:
        first.close()
    assert ProbeCache(tmp_path).load() == probed
    second = Engine(home=tmp_path)
    try:
        started = time.perf_counter()
        cached = second.list_targets()
        assert time.perf_counter() - started < 0.5  # no worker start, no probe
        assert cached == probed
        deadline = time.time() + 120  # the refresh behind it starts the compile worker
        while time.time() < deadline and second.targets.report is cached:
            time.sleep(0.2)
        assert second.targets.report is not cached and second.targets.report.targets == probed.targets
    finally:
        second.close()


def test_a_changed_setup_or_a_corrupt_file_is_a_miss(tmp_path, monkeypatch):
    cache = ProbeCache(tmp_path)
    engine = Engine(home=tmp_path)
    try:
        report = engine.list_targets()
    finally:
        engine.close()
    assert cache.load() == report
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")  # what the probe would see differs
    assert cache.load() is None
    monkeypatch.undo()
    assert cache.load() == report
    cache.path.write_text('{"fingerprint": ')
    assert cache.load() is None
