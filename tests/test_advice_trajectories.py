"""The recorded H200 trajectories (bench/advice_trajectories.py): each step follows the previous step's top
advice, every passing kernel's fraction of speed of light is set, at most 1 and larger for a faster kernel,
and the last steps reach 3x over the faster of eager and torch.compile."""

from __future__ import annotations

import ast
import importlib.util
import json
import math
from pathlib import Path

from kforge_mcp.advice import agent
from kforge_mcp.profiling.report import ProfileReport

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "bench" / "results" / "advice-trajectories" / "h200"


def records() -> dict[str, list[dict]]:
    by_problem: dict[str, list[dict]] = {}
    for f in sorted(RECORD.glob("step*.json"), key=lambda p: int(p.stem[4:])):
        for rec in json.loads(f.read_text())["records"]:
            by_problem.setdefault(rec["problem"], []).append(rec)
    return by_problem


def test_each_step_follows_the_top_advice_on_the_one_before():
    for problem, recs in records().items():
        assert len(recs) >= 4, problem  # a first kernel and at least three steps of advice
        for before, after in zip(recs, recs[1:]):
            source = (ROOT / "bench" / "candidates" / problem / after["candidate"]).read_text()
            doc = ast.get_docstring(ast.parse(source)) or ""
            assert f'"{before["profile"]["advice"][0]["title"]}"' in doc, (problem, after["candidate"])


def test_the_agent_gives_each_recorded_profile_the_top_advice_it_gave_then():
    """Each step's whole profile is in the record: read offline again, its top advice (the one the next step
    followed) is the same rule with the same title."""
    for problem, recs in records().items():
        for rec in recs:
            now = agent.analyze(ProfileReport.model_validate(rec["profile_report"])).recommendations[0]
            then = rec["profile"]["advice"][0]
            assert (now.rule, now.title) == (then["rule"], then["title"]), (problem, rec["candidate"])


def test_fractions_of_speed_of_light_rank_the_passing_kernels():
    for problem, recs in records().items():
        passing = sorted(
            (r["verify"]["candidate_ms"], r["verify"]["fraction_of_sol"])
            for r in recs
            if r["verify"]["verdict"] == "pass"
        )
        assert all(f is not None and 0 < f <= 1 for _, f in passing), problem
        assert all(a[1] >= b[1] for a, b in zip(passing, passing[1:])), (problem, passing)


def test_the_last_steps_reach_three_times_the_faster_baseline():
    last = [recs[-1]["verify"] for recs in records().values()]
    assert len(last) >= 4 and all(v["verdict"] == "pass" for v in last)
    geomean = math.exp(sum(math.log(v["speedup"]) for v in last) / len(last))
    assert geomean >= 3.0, geomean


def test_the_report_is_what_the_records_say(tmp_path):
    spec = importlib.util.spec_from_file_location("advice_trajectories", ROOT / "bench" / "advice_trajectories.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    copy = tmp_path / "h200"
    copy.mkdir()
    for f in RECORD.glob("step*.json"):
        (copy / f.name).write_text(f.read_text())
    assert module.report(copy) == 0
    assert (tmp_path / "h200.md").read_text() == (RECORD.parent / "h200.md").read_text()
