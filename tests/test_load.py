"""Concurrent tool calls over streamable HTTP: a real `kforge serve --transport http` subprocess and
several SDK clients (bench/load_http.py, smaller and without verify). The full run with the
recorded figures is `python bench/load_http.py` (bench/results/load-http/cpu.md)."""

from __future__ import annotations

import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from load_http import HEADROOM_MB, run_load


@pytest.mark.slow
def test_concurrent_calls_from_several_clients_complete_and_the_server_keeps_serving(tmp_path):
    result = run_load(tmp_path / "home", clients=4, calls=20, rounds=1, cheap=True, settle_s=1.0)
    rd = result["rounds"][0]
    assert rd["calls"] == 20 and rd["errors"] == 0, rd["error_samples"]
    assert set(rd["per_tool"]) == {"list_targets", "compile", "analyze_profile"}
    assert result["still_serving"] and result["server_alive"]
    # bounded: the burst adds little over the warm server (only the compile worker runs here)
    assert rd["peak"]["tree_mb"] < result["baseline"]["tree_mb"] + HEADROOM_MB, (result["baseline"], rd["peak"])
