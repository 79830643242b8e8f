"""Problems with get_input_sets(): verify lists every set it checked, and with timing_sets 'all' times
each one, with its speedup and the geomean over all shapes. Real workers on the Triton interpreter."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from mcp import Client

from kforge_mcp.judge.verify.timed import INTERPRETER_TIMING

PROBLEM = str(ROOT / "tests" / "cheats" / "problem.py")  # get_input_sets(): 8x128 and 64x128
HONEST = str(ROOT / "tests" / "cheats" / "honest.py")
FAST = {"target": "triton", "trials": 1, "baselines": ["eager"]}
SHAPES = [["8x128 float32"], ["64x128 float32"]]


def test_verify_lists_the_sets_it_checked_and_times_only_the_main_shape_by_default(engine):
    report = engine.verify(PROBLEM, HONEST, **FAST)
    assert report.verdict == "pass", report.errors
    assert [s.shapes for s in report.input_sets] == SHAPES and all(s.correct for s in report.input_sets)
    assert all(s.timing is None and s.speedup is None for s in report.input_sets)
    assert report.speedup is not None and report.speedup_geomean is None


def test_timing_sets_all_times_each_set(engine):
    report = engine.verify(PROBLEM, HONEST, **FAST, timing_sets="all")
    assert report.verdict == "pass", report.errors
    assert [s.index for s in report.input_sets] == [1, 2] and [s.shapes for s in report.input_sets] == SHAPES
    for s in report.input_sets:
        assert s.correct and s.speedup_over == "eager"
        # three calls, or two where the interpreter's calls outlast its timing budget
        assert s.timing.candidate.samples >= INTERPRETER_TIMING["min_calls"]
        assert s.speedup == pytest.approx(s.timing.eager.median_ms / s.timing.candidate.median_ms)
    speedups = [report.speedup] + [s.speedup for s in report.input_sets]
    assert report.speedup_geomean == pytest.approx(math.prod(speedups) ** (1 / 3))
    # the larger set takes the candidate longer than the smaller one: each set was timed on its own shape
    small, large = (s.timing.candidate.median_ms for s in report.input_sets)
    assert large > small


def test_a_bad_timing_sets_value_is_an_input_error(engine):
    from kforge_mcp.core.errors import InputError

    with pytest.raises(InputError, match="timing_sets must be 'main' or 'all'"):
        engine.verify(PROBLEM, HONEST, **FAST, timing_sets="some")


@pytest.mark.anyio
async def test_the_verify_tool_takes_timing_sets(server):
    args = {"problem": PROBLEM, "candidate": HONEST, **FAST, "timing_sets": "all", "wait_s": 600}
    async with Client(server) as client:
        result = await client.call_tool("verify", args)
    report = result.structured_content
    assert not result.is_error and report["verdict"] == "pass"
    assert all(s["speedup"] > 0 for s in report["input_sets"]) and report["speedup_geomean"] > 0


def test_kforge_verify_timing_sets_all(tmp_path):
    env = {**os.environ, "KFORGE_HOME": str(tmp_path)}
    cli = [sys.executable, "-m", "kforge_mcp.cli", "verify", PROBLEM, HONEST, "--target", "triton", "--trials", "1"]
    proc = subprocess.run(
        [*cli, "--baselines", "eager", "--timing-sets", "all"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "input set 1: 8x128 float32: correct, speedup " in proc.stdout
    assert "input set 2: 64x128 float32: correct, speedup " in proc.stdout
    assert "speedup geomean over get_inputs() and 2 input sets: " in proc.stdout
    as_json = subprocess.run(
        [*cli, "--baselines", "eager", "--json"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert [s["shapes"] for s in json.loads(as_json.stdout)["input_sets"]] == SHAPES
