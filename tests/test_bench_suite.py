"""kforge bench: a suite of problems and candidates judged through the engine's real workers
(Triton interpreter on CPU), scored, written, resumed; the metric math on hand-made reports."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kforge_mcp.core.schemas import Finding, Timing, TimingStats, VerifyReport
from kforge_mcp.suite import candidate_target, discover, run_bench
from kforge_mcp.suite_report import BenchSummary, fast_p, problem_result, suite_metrics, write_html, write_plot

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TESTS = Path(__file__).resolve().parent
CHEATS = TESTS / "cheats"
FAST = {"trials": 1, "baselines": ["eager"], "timing_budget_s": 0.2}  # compiled costs 10-20 s per problem on CPU


def tree(root: Path, files: dict[str, Path | str]) -> Path:
    """Copies (or writes) files into root; copies, not links, so the engine's path check sees them under tmp."""
    for rel, src in files.items():
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(src, Path):
            shutil.copyfile(src, dest)
        else:
            dest.write_text(src)
    return root


# ---- layout ----


def test_candidate_target_rule():
    assert candidate_target("triton.py") == "triton"
    assert candidate_target("triton_naive.py") == "triton"
    assert candidate_target("cuda-v2.py") == "cuda"
    assert candidate_target("cute.py") == "cute"
    assert candidate_target("sample_0.py") is None
    assert candidate_target("tritonish.py") is None  # a prefix needs the separator
    assert candidate_target("level_1_problem_1_sample_0_kernel.py") is None


def test_discover_filters_targets_sorts_naturally_and_checks_problems(tmp_path):
    problem = (CHEATS / "problem.py").read_text()
    tree(
        tmp_path,
        {
            "p/10_Big.py": problem,
            "p/2_Small.py": problem,
            "p/bad.py": "import torch\nx = 1\n",
            "p/broken.py": "def (:\n",
            "p/__init__.py": "",
            "c/10_Big/triton.py": "x",
            "c/10_Big/cuda.py": "x",
            "c/10_Big/sample_0.py": "x",
            "c/2_Small.py": "x",
        },
    )
    plan = discover(tmp_path / "p", tmp_path / "c", "triton")
    assert [p.name for p in plan] == ["2_Small", "10_Big", "bad", "broken"]
    small, big, bad, broken = plan
    assert [Path(c).name for c in big.candidates] == ["sample_0.py", "triton.py"] and big.other_targets == ["cuda.py"]
    assert [Path(c).name for c in small.candidates] == ["2_Small.py"]  # the flat layout
    assert "does not define Model, get_inputs, get_init_inputs" in bad.error and "bad.py" in bad.error
    assert "syntax error" in broken.error and small.error is None
    assert [Path(c).name for c in discover(tmp_path / "p", tmp_path / "c", "cuda")[1].candidates] == [
        "cuda.py",
        "sample_0.py",
    ]
    with pytest.raises(Exception, match="no such folder"):
        discover(tmp_path / "nope", tmp_path / "c", "triton")


# ---- the metric math, on hand-made reports ----


def report(
    verdict: str,
    cand_ms: float | None = None,
    eager_ms: float | None = None,
    compiled_ms: float | None = None,
    findings=(),
) -> VerifyReport:
    def stats(ms):
        return (
            None
            if ms is None
            else TimingStats(
                median_ms=ms, mean_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0, spread=0, samples=3, clock="test"
            )
        )

    r = VerifyReport(
        verdict=verdict,
        correct=verdict in ("pass", "suspicious"),
        findings=list(findings),
        timing=Timing(candidate=stats(cand_ms), eager=stats(eager_ms), compiled=stats(compiled_ms)),
    )
    medians = {k: v for k, v in (("eager", eager_ms), ("compiled", compiled_ms)) if v is not None}
    if cand_ms and medians:
        best = min(medians, key=medians.get)
        r.speedup, r.speedup_over = medians[best] / cand_ms, best
    return r


def test_best_candidate_and_both_speedups():
    r = problem_result(
        "p",
        "/p.py",
        [
            ("slow.py", report("pass", 2.0, eager_ms=4.0, compiled_ms=3.0)),  # 1.5x over compiled
            ("fast.py", report("pass", 1.0, eager_ms=4.0, compiled_ms=3.0)),  # 3x over compiled, 4x over eager
            (
                "cheat.py",
                report(
                    "suspicious",
                    0.1,
                    eager_ms=4.0,
                    compiled_ms=3.0,
                    findings=[Finding(code="torch_op_instead_of_kernel", message="m", severity="suspicious")],
                ),
            ),
            ("boom.py", report("error")),
        ],
    )
    assert r.correct and r.best_candidate == "fast.py" and r.best_verdict == "pass"
    assert r.speedup == pytest.approx(3.0) and r.speedup_over == "compiled"
    assert r.speedup_eager == pytest.approx(4.0) and r.speedup_compiled == pytest.approx(3.0)
    assert [c.verdict for c in r.candidates] == ["pass", "pass", "suspicious", "error"]
    only_cheat = problem_result(
        "q", "/q.py", [("cheat.py", report("suspicious", 0.1, eager_ms=4.0)), ("wrong.py", report("fail"))]
    )
    assert not only_cheat.correct and only_cheat.best_verdict == "suspicious"  # a 40x cheat is still a failure
    assert only_cheat.findings == [] and only_cheat.speedup == pytest.approx(40.0)
    none = problem_result("r", "/r.py", [])
    assert not none.correct and none.best_verdict is None and "no candidates" in none.error


def test_suite_metrics_fast_p_and_geomeans():
    probs = [
        problem_result("a", "/a", [("x", report("pass", 1.0, eager_ms=4.0, compiled_ms=2.5))]),  # 2.5x (4x eager)
        problem_result("b", "/b", [("x", report("pass", 1.0, eager_ms=1.2, compiled_ms=1.6))]),  # 1.2x
        problem_result("c", "/c", [("x", report("pass", 1.0, eager_ms=0.5, compiled_ms=0.9))]),  # 0.5x
        problem_result("d", "/d", [("x", report("suspicious", 0.1, eager_ms=4.0, compiled_ms=4.0))]),  # cheat: 0
        problem_result("e", "/e", [("x", report("error"))]),
    ]
    m = suite_metrics(probs)
    assert (m.problems, m.correct, m.correctness_rate, m.candidates_judged) == (5, 3, 0.6, 5)
    assert m.fast_p == {"0": 0.6, "1": 0.4, "1.5": 0.2, "2": 0.2}
    assert m.fast_p_eager == {"0": 0.6, "1": 0.4, "1.5": 0.2, "2": 0.2}
    assert m.fast_p_compiled == {"0": 0.6, "1": 0.4, "1.5": 0.4, "2": 0.2}
    assert m.geomean_speedup == pytest.approx((2.5 * 1.2 * 0.5) ** (1 / 3))
    assert m.geomean_speedup_all == pytest.approx((2.5 * 1.2 * 0.5) ** (1 / 5))  # failures as 1.0x
    assert m.geomean_speedup_eager == pytest.approx((4.0 * 1.2 * 0.5) ** (1 / 3))
    assert m.verdicts == {"pass": 3, "suspicious": 1, "error": 1}
    assert fast_p(probs, 1.2) == 0.2  # strictly faster than p
    eager_only = suite_metrics([problem_result("a", "/a", [("x", report("pass", 1.0, eager_ms=2.0))])])
    assert eager_only.fast_p_compiled is None and eager_only.geomean_speedup_compiled is None
    assert math.isclose(eager_only.geomean_speedup, 2.0)


def test_plot_degrades_without_matplotlib(tmp_path, monkeypatch):
    probs = [problem_result("a", "/a", [("x", report("pass", 1.0, eager_ms=2.0))])]
    s = BenchSummary(
        target="triton", mode="verify", problems_dir="/p", out=str(tmp_path), suite=suite_metrics(probs), problems=probs
    )
    assert write_plot(s, tmp_path / "ok.png") is None and (tmp_path / "ok.png").stat().st_size > 1000
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    why = write_plot(s, tmp_path / "no.png")
    assert "matplotlib is not installed" in why and not (tmp_path / "no.png").exists()
    write_html(s, tmp_path / "b.html", None)
    assert (
        'id="problems"' in (tmp_path / "b.html").read_text()
        and "data:image/png" not in (tmp_path / "b.html").read_text()
    )


# ---- real runs through the engine's workers ----


@pytest.mark.slow
def test_suite_of_examples_and_hostile_candidates(engine, tmp_path):
    """Example problems and candidates plus crashing, wrong and cheating ones: each is a result, the run finishes."""
    root = tree(
        tmp_path,
        {
            "problems/fused_bias_gelu.py": EXAMPLES / "problems" / "fused_bias_gelu.py",
            "problems/small_softmax.py": CHEATS / "problem.py",
            "problems/softmax_cheats_only.py": CHEATS / "problem.py",
            "problems/no_model.py": "import torch\n\ndef get_inputs():\n    return [torch.randn(4)]\n",
            "cands/fused_bias_gelu/triton.py": EXAMPLES / "candidates" / "fused_bias_gelu" / "triton.py",
            "cands/fused_bias_gelu/triton_crash.py": EXAMPLES / "candidates" / "fused_bias_gelu" / "triton_crash.py",
            "cands/fused_bias_gelu/triton_wrong.py": EXAMPLES / "candidates" / "fused_bias_gelu" / "triton_wrong.py",
            "cands/fused_bias_gelu/cuda.py": EXAMPLES
            / "candidates"
            / "fused_bias_gelu"
            / "cuda.py",  # another target's
            "cands/small_softmax/sample_0.py": CHEATS / "honest.py",
            "cands/small_softmax/triton_torch_op.py": CHEATS / "torch_op.py",
            "cands/softmax_cheats_only/triton_torch_op.py": CHEATS / "torch_op.py",
            "cands/softmax_cheats_only/triton_mutate.py": CHEATS / "mutate_input.py",
            "cands/no_model/triton.py": CHEATS / "honest.py",
        },
    )
    seen = []
    s = run_bench(
        root / "problems",
        root / "cands",
        "triton",
        root / "out",
        engine=engine,
        timeout_s=180,
        on_progress=lambda d, t, m: seen.append((d, t)),
        **FAST,
    )
    by = {r.problem: r for r in s.problems}
    assert list(by) == ["fused_bias_gelu", "no_model", "small_softmax", "softmax_cheats_only"]
    gelu = by["fused_bias_gelu"]
    verdicts = {c.candidate: c.verdict for c in gelu.candidates}
    assert verdicts == {
        "fused_bias_gelu/triton.py": "pass",
        "fused_bias_gelu/triton_crash.py": "error",
        "fused_bias_gelu/triton_wrong.py": "fail",
    }  # cuda.py not judged under triton
    assert gelu.correct and gelu.best_candidate == "fused_bias_gelu/triton.py" and gelu.speedup_eager > 0
    assert gelu.speedup_compiled is None  # not timed here
    assert "does not define Model, get_init_inputs" in by["no_model"].error and not by["no_model"].candidates
    assert by["small_softmax"].correct and by["small_softmax"].best_candidate == "small_softmax/sample_0.py"
    cheats = by["softmax_cheats_only"]
    assert not cheats.correct and cheats.best_verdict == "suspicious"
    assert {c.verdict for c in cheats.candidates} == {"suspicious"}
    assert (s.suite.problems, s.suite.correct, s.suite.candidates_judged) == (4, 2, 7)
    assert s.suite.fast_p["0"] == 0.5 and s.suite.fast_p["1"] == 0.0  # the interpreter is never faster than eager
    assert s.suite.geomean_speedup == pytest.approx(math.sqrt(gelu.speedup * by["small_softmax"].speedup))
    assert s.execution == "triton-interpreter" and s.judged_now == 7 and s.reused == 0
    assert seen[-1] == (7, 7)

    out = root / "out"
    assert len((out / "results.jsonl").read_text().splitlines()) == 7
    assert BenchSummary.model_validate_json((out / "summary.json").read_text()).suite == s.suite
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "bench.html").read_text()
    assert 'id="problems"' in html and "data:image/png;base64," in html
    assert "softmax_cheats_only" in html and "torch_op_instead_of_kernel" in html and "fast_1.5" in html


@pytest.mark.slow
def test_resume_skips_done_pairs_and_rejudges_changed_files(engine, tmp_path, monkeypatch):
    """A hang is stopped at the timeout and is a failure; a rerun verifies nothing; a changed file is judged again."""
    root = tree(
        tmp_path,
        {
            "problems/small_softmax.py": CHEATS / "problem.py",
            "cands/small_softmax/sample_0.py": CHEATS / "honest.py",
            "cands/small_softmax/triton_hang.py": TESTS / "candidates" / "hang.py",
        },
    )
    calls = []  # the candidates sent to be verified
    real_batch = engine.batch_call

    def batch_call(items, *args, **kwargs):
        calls.extend(item.candidate for item in items)
        return real_batch(items, *args, **kwargs)

    monkeypatch.setattr(engine, "batch_call", batch_call)

    def bench():
        calls.clear()
        return run_bench(
            root / "problems", root / "cands", "triton", root / "out", engine=engine, timeout_s=20, plot=False, **FAST
        )

    first = bench()
    assert len(calls) == 2 and first.judged_now == 2
    hang = next(c for c in first.problems[0].candidates if c.candidate.endswith("triton_hang.py"))
    assert hang.verdict == "error" and "did not finish within" in (hang.error or "")  # names the limit that stopped it
    assert first.problems[0].correct

    again = bench()
    assert calls == [] and again.judged_now == 0 and again.reused == 2
    assert again.suite == first.suite and again.problems[0].candidates == first.problems[0].candidates

    honest = root / "cands" / "small_softmax" / "sample_0.py"
    honest.write_text(honest.read_text() + "\n# edited\n")
    third = bench()
    assert [Path(c).name for c in calls] == ["sample_0.py"] and third.judged_now == 1 and third.reused == 1
    lines = (root / "out" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 and len({json.loads(line)["key"] for line in lines}) == 3


@pytest.mark.slow
def test_generate_mode_runs_the_loop_per_problem(engine, tmp_path):
    root = tree(tmp_path, {"problems/small_softmax.py": CHEATS / "problem.py"})
    prompts = []

    def generate(prompt: str) -> str:
        prompts.append(prompt)
        return "```python\n" + (CHEATS / "honest.py").read_text() + "```\n"

    kw = dict(engine=engine, generate=generate, iterations=1, timeout_s=120, plot=False, **FAST)
    s = run_bench(root / "problems", None, "triton", root / "out", **kw)
    assert s.mode == "generate" and len(prompts) == 1
    r = s.problems[0]
    assert r.correct and r.best_candidate == "generated/small_softmax/triton_loop.py"
    assert "softmax_kernel" in (root / "out" / "generated" / "small_softmax" / "triton_loop.py").read_text()
    assert run_bench(root / "problems", None, "triton", root / "out", **kw).reused == 1 and len(prompts) == 1


@pytest.mark.slow
def test_cli_bench_json_end_to_end(tmp_path):
    root = tree(
        tmp_path,
        {
            "problems/small_softmax.py": CHEATS / "problem.py",
            "cands/small_softmax/sample_0.py": CHEATS / "honest.py",
            "cands/small_softmax/triton_torch_op.py": CHEATS / "torch_op.py",
        },
    )
    kforge = [sys.executable, "-m", "kforge_mcp.cli", "--home", str(tmp_path / "home"), "bench"]
    args = [
        "--problems",
        str(root / "problems"),
        "--candidates",
        str(root / "cands"),
        "--target",
        "triton",
        "--out",
        str(root / "out"),
        "--trials",
        "1",
        "--baselines",
        "eager",
        "--timing-budget",
        "0.2",
    ]
    env = {**os.environ, "COLUMNS": "160"}
    done = subprocess.run(kforge + args + ["--json"], capture_output=True, text=True, timeout=400, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    s = json.loads(done.stdout)  # nothing else on stdout
    assert s["suite"]["correct"] == 1 and s["suite"]["candidates_judged"] == 2 and s["suite"]["fast_p"]["0"] == 1.0
    assert s["suite"]["verdicts"] == {"pass": 1, "suspicious": 1}
    assert (root / "out" / "bench.html").is_file() and (root / "out" / "summary.json").is_file()

    table = subprocess.run(kforge + args, capture_output=True, text=True, timeout=400, env=env, cwd=ROOT)
    assert table.returncode == 0 and "small_softmax" in table.stdout and "0 judged now, 2 reused" in table.stdout

    bad = subprocess.run(
        kforge
        + [
            "--problems",
            str(root / "nope"),
            "--candidates",
            str(root / "cands"),
            "--target",
            "triton",
            "--out",
            str(root / "o2"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "no such folder" in bad.stderr
