"""A hung candidate cannot block the queue: a verify that finds the CPU worker busy starts on a second
one, and a correctness call that outlives its limit (from the reference's own time) is killed then,
not at the job's timeout. Real workers on the Triton interpreter."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, example, hostile, problem

from kforge_mcp.api import Engine
from kforge_mcp.core.options import INTERPRETER_TRIAL_SCALE, TRIAL_FLOOR_S
from kforge_mcp.runtime.pool import JobCancelled

SOFTMAX = problem("row_softmax")
FAST = {"target": "triton", "trials": 2, "baselines": ["eager"], "timing_budget_s": 0.2}
HANGS_ON_SECOND_CALL = """

_Honest = ModelNew


class ModelNew(_Honest):
    calls = 0

    def forward(self, x):
        type(self).calls += 1
        while type(self).calls > 1:
            time.sleep(0.1)
        return super().forward(x)
"""


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    home = tmp_path_factory.mktemp("kforge-queue")
    eng = Engine(home=home, allow_dirs=[ROOT, home])
    yield eng
    eng.close()


@pytest.mark.slow
def test_a_good_verify_does_not_wait_behind_a_hung_one(engine):
    good = example("row_softmax", "triton")
    assert engine.verify(SOFTMAX, good, **FAST).verdict == "pass"  # the warm worker and the reference's caches
    started = time.monotonic()
    alone = engine.verify(SOFTMAX, good, **FAST)
    own_time = time.monotonic() - started
    assert alone.verdict == "pass"

    hung_progress: list[str] = []
    cancel, outcome = threading.Event(), {}

    def hang():
        try:
            outcome["report"] = engine.verify(
                SOFTMAX, hostile("hang"), **FAST, timeout_s=300, on_progress=hung_progress.append, cancel=cancel
            )
        except JobCancelled:
            outcome["cancelled"] = True

    hung = threading.Thread(target=hang)
    hung.start()
    deadline = time.monotonic() + 60
    while not any("correctness trial 1/2" in m for m in hung_progress):  # it holds the warm worker now
        assert time.monotonic() < deadline, hung_progress
        time.sleep(0.1)
    try:
        started = time.monotonic()
        report = engine.verify(SOFTMAX, good, **FAST)
        took = time.monotonic() - started
        assert report.verdict == "pass", report.errors
        # the proof: the hung one still holds its worker, so the good one did not wait for it to end
        assert hung.is_alive()
        # and the wait was its own time plus a second worker's start (torch's import), well inside the hung one's
        # 120 s limit, on a 2-core machine that may be running other tests beside this one
        assert took < own_time + 90, (took, own_time)
        assert any("(limit 120 s)" in m for m in hung_progress), hung_progress  # the limit is shown
    finally:
        cancel.set()
        hung.join(60)
    assert outcome.get("cancelled")


@pytest.mark.slow
def test_a_call_that_outlives_its_limit_is_killed_then(engine):
    candidate = Path(example("row_softmax", "triton")).read_text() + HANGS_ON_SECOND_CALL
    progress: list[str] = []
    started = time.monotonic()
    report = engine.verify(SOFTMAX, candidate, **FAST, timeout_s=300, on_progress=progress.append)
    took = time.monotonic() - started
    assert report.verdict == "error"
    error = report.errors[0]
    assert error.startswith("correctness trial 2/2 did not finish within "), error
    assert f"{INTERPRETER_TRIAL_SCALE}x the reference's" in error and "the worker was killed" in error
    limit = float(error.split("did not finish within ")[1].split(" s")[0])
    assert limit >= TRIAL_FLOOR_S and took < limit + 60  # killed at its limit, far before the job's 300 s
    # progress names the step's limit, then says how long it has run
    assert any(m == f"correctness trial 2/2 (limit {limit:g} s)" for m in progress), progress
    assert any(m.startswith("correctness trial 2/2: ") and f"of its {limit:g} s limit" in m for m in progress)


def test_a_broken_candidate_in_a_batch_is_its_own_error_report(engine):
    reports = engine.verify_batch(
        [
            {"problem": SOFTMAX, "candidate": hostile("syntax_error")},
            {"problem": SOFTMAX, "candidate": example("row_softmax", "triton")},
        ],
        **FAST,
    )
    assert [r.verdict for r in reports] == ["error", "pass"]
    assert reports[0].diagnostics[0].line == 5 and "syntax error" in reports[0].errors[0]
