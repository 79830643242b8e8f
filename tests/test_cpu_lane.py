"""The CPU lane (judge/lane_plan.py): a candidate that runs through Triton's interpreter is verified at the
problem's own shapes where its calls fit the budget, else on a reduced instance that says which shapes ran and that
a GPU runs the published ones; the calls left follow the candidate's own time; a call's limit follows the work of
the shapes that run and says how to raise it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kforge_mcp.judge.lane_plan import MIN_TRIALS, LanePlan

ROWS = "tests/problems/rows_bias_scale.py"
ROWS_CANDIDATE = "tests/candidates/rows_bias_scale.py"
FAST = {"target": "triton", "device": "cpu", "baselines": ["eager"], "timing_budget_s": 0.05}
HANGS_ON_SECOND_CALL = """

import time

_Honest = ModelNew


class ModelNew(_Honest):
    calls = 0

    def forward(self, x):
        type(self).calls += 1
        while type(self).calls > 1:
            time.sleep(0.1)
        return super().forward(x)
"""

SLOW_THEN_HANGS = """

import time

_Honest = ModelNew


class ModelNew(_Honest):
    calls = 0

    def forward(self, x):
        type(self).calls += 1
        time.sleep(3.0)
        while type(self).calls > 1:
            time.sleep(0.1)
        return super().forward(x)
"""


def test_a_problem_too_large_for_the_budget_runs_on_fewer_rows_and_says_so(engine):
    report = engine.verify(ROWS, ROWS_CANDIDATE, **FAST, timeout_s=30)
    assert report.verdict == "pass", report.errors
    (shape,) = report.shapes
    rows = int(shape.split("x")[0])
    assert 2 <= rows < 8192 and shape.endswith("x512 float32")  # fewer rows, every feature
    assert report.published_shapes == ["8192x512"]
    (finding,) = [f for f in report.findings if f.code == "reduced_instance"]
    assert (
        f"batch_size 8192 -> {rows}" in finding.message and "a GPU verify runs the published shapes" in finding.message
    )
    assert finding.evidence["published_shapes"] == ["8192x512"] and report.trials == 5


def test_a_problem_that_fits_runs_at_its_own_shapes(engine):
    report = engine.verify("tests/problems/vector_add.py", "tests/candidates/vector_add.py", **FAST)
    assert report.verdict == "pass", report.errors
    assert report.shapes == ["4096 float32", "4096 float32"] and report.published_shapes is None
    assert not [f for f in report.findings if f.code in ("reduced_instance", "interpreter_budget")]


def plan(trials: int = 5, budget_s: float = 120.0, timeout_s: float = 300.0) -> LanePlan:
    return LanePlan(budget_s=budget_s, timeout_s=timeout_s, trials=trials)


@pytest.mark.parametrize(
    ("first_s", "trials", "determinism", "timing"),
    [
        (5.0, 5, True, True),  # 1 + 4 trials, determinism and 4 timed calls: 50 s of 120
        (20.0, 5, True, False),  # the timing goes first
        (30.0, 4, False, False),  # then the determinism check, then trials
        (80.0, MIN_TRIALS, False, False),  # never fewer than two
    ],
)
def test_the_calls_left_follow_the_first_calls_time(first_s, trials, determinism, timing):
    p = plan()
    assert p.after_first_call(first_s, elapsed_s=first_s + 5) is None
    assert (p.run_trials, p.determinism, p.timing) == (trials, determinism, timing)
    assert bool(p.notes) == (not timing)


def test_calls_that_cannot_end_before_the_timeout_stop_the_verify_with_what_would_let_them():
    p = plan()
    why = p.after_first_call(150.0, elapsed_s=160.0)  # the second trial would end near 340 s
    assert why is not None and "past the timeout of 300 s" in why and "Raise --timeout / timeout_s to 380" in why


def test_a_call_past_the_limit_its_shapes_give_says_which_limit_and_how_to_raise_it(engine):
    hangs = Path(ROWS_CANDIDATE).read_text() + HANGS_ON_SECOND_CALL
    report = engine.verify(ROWS, hangs, **FAST, timeout_s=60)  # floors at 60 s: 24 s for a first call, 4 s after
    assert report.verdict == "error"
    error = report.errors[0]
    # 4 s, or 1000x the reference's time where a loaded machine made that longer
    assert error.startswith("correctness trial 2/5 did not finish within "), error
    assert "4x the candidate's slowest call" in error and "estimated: " in error and "at these shapes" in error
    assert "raise --timeout / timeout_s (now 60 s)" in error and "the worker was killed" in error


@pytest.mark.slow  # it waits for the job's timeout, by design
def test_a_call_that_would_outlast_the_job_stops_as_its_call_with_the_estimate(engine):
    """4x a 3 s first call passes the 15 s timeout: the second call's limit is the time left, and its error still
    says the estimate and how to raise the timeout (the job's own timeout would say neither)."""
    slow = Path(ROWS_CANDIDATE).read_text() + SLOW_THEN_HANGS
    report = engine.verify(ROWS, slow, **FAST, timeout_s=15)
    assert report.verdict == "error"
    error = report.errors[0]
    assert error.startswith("correctness trial 2/2 did not finish within "), error
    assert "the time left before the job's timeout (under the largest of " in error
    assert "4x the candidate's slowest call" in error
    assert "estimated: 3." in error and "raise --timeout / timeout_s (now 15 s)" in error
