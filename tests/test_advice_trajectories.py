"""The recorded H200 trajectories (tests/data/advice-trajectories: bench/advice_trajectories.py's record and
candidates, digested by bench/digests.py): each step follows the previous step's top advice, every passing
kernel's fraction of speed of light is set, at most 1 and larger for a faster kernel, and the last steps
reach 3x over the faster of eager and torch.compile."""

from __future__ import annotations

import json
import math
from pathlib import Path

from kforge_mcp.advice import agent
from kforge_mcp.profiling.report import ProfileReport

RECORD = Path(__file__).resolve().parent / "data" / "advice-trajectories" / "h200.json"


def records() -> dict[str, list[dict]]:
    return json.loads(RECORD.read_text())["problems"]


def test_the_agent_gives_each_recorded_profile_the_top_advice_it_gave_then():
    """Each step's whole profile is in the record: read offline again, its top advice (the one the next step
    followed) is the same rule with the same title."""
    for problem, recs in records().items():
        for rec in recs:
            now = agent.analyze(ProfileReport.model_validate(rec["profile_report"])).recommendations[0]
            assert (now.rule, now.title) == (rec["top_rule"], rec["top_advice"]), (problem, rec["candidate"])


def test_each_step_follows_the_top_advice_on_the_one_before():
    for problem, recs in records().items():
        assert len(recs) >= 4, problem  # a first kernel and at least three steps of advice
        for before, after in zip(recs, recs[1:]):
            assert f'"{before["top_advice"]}"' in after["docstring"], (problem, after["candidate"])


def test_fractions_of_speed_of_light_rank_the_passing_kernels():
    for problem, recs in records().items():
        passing = sorted((r["candidate_ms"], r["fraction_of_sol"]) for r in recs if r["verdict"] == "pass")
        assert all(f is not None and 0 < f <= 1 for _, f in passing), problem
        assert all(a[1] >= b[1] for a, b in zip(passing, passing[1:])), (problem, passing)


def test_the_last_steps_reach_three_times_the_faster_baseline():
    last = [recs[-1] for recs in records().values()]
    assert len(last) >= 4 and all(v["verdict"] == "pass" for v in last)
    geomean = math.exp(sum(math.log(v["speedup"]) for v in last) / len(last))
    assert geomean >= 3.0, geomean
