"""A judged suite as figures and pictures: per-candidate and per-problem results, the suite's
metrics (correctness, geomean speedup, fast_p), bench.png and bench.html.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from kforge_mcp.advice.drawing import one_at_a_time
from kforge_mcp.core.schemas import VerifyReport

RESULTS, SUMMARY, PNG, HTML = "results.jsonl", "summary.json", "bench.png", "bench.html"

FAST_P = (0.0, 1.0, 1.5, 2.0)


VERDICT_RANK = {"pass": 0, "suspicious": 1, "fail": 2, "error": 3}


def geomean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def _fmt(value, spec: str = ".3g", suffix: str = "") -> str:
    return "-" if value is None else f"{format(value, spec)}{suffix}"


class CandidateResult(BaseModel):
    candidate: str = Field(description="path relative to the candidates folder (or the generated file)")
    verdict: str | None = None
    speedup: float | None = Field(None, description="over the faster baseline timed")
    speedup_eager: float | None = None
    speedup_compiled: float | None = None
    fraction_of_sol: float | None = None
    findings: list[str] = Field(default_factory=list, description="finding codes")
    error: str | None = Field(None, description="first line of the first error, when it did not run")


class ProblemResult(BaseModel):
    problem: str = Field(description="the problem file's stem")
    path: str
    correct: bool = Field(False, description="its best candidate passed (suspicious counts as a failure)")
    best_verdict: str | None = Field(None, description="pass > suspicious > fail > error; None: no candidates")
    best_candidate: str | None = None
    speedup: float | None = Field(None, description="best candidate over the faster baseline timed")
    speedup_over: str | None = None
    speedup_ci: list[float] | None = None
    speedup_eager: float | None = None
    speedup_compiled: float | None = None
    fraction_of_sol: float | None = None
    findings: list[dict[str, Any]] = Field(default_factory=list, description="the best candidate's findings")
    error: str | None = Field(None, description="why the problem could not be judged (bad problem, no candidates)")
    candidates: list[CandidateResult] = Field(default_factory=list)


class SuiteMetrics(BaseModel):
    problems: int
    correct: int
    correctness_rate: float = Field(description="correct problems over all problems (also fast_0)")
    candidates_judged: int
    verdicts: dict[str, int] = Field(default_factory=dict, description="over all candidates judged")
    geomean_speedup: float | None = Field(
        None,
        description="over the faster baseline, geometric mean over "
        "the problems with a correct candidate only (count: 'correct')",
    )
    geomean_speedup_all: float | None = Field(
        None,
        description="the same over every problem, one without a correct candidate counting as 1.0x (PyTorch is kept)",
    )
    geomean_speedup_eager: float | None = Field(None, description="over eager, correct problems only")
    geomean_speedup_compiled: float | None = Field(None, description="over torch.compile, correct problems only")
    fast_p: dict[str, float] = Field(
        default_factory=dict,
        description="share of all problems whose best "
        "candidate is correct and faster than p x the faster baseline "
        "(p=0: correct at all)",
    )
    fast_p_eager: dict[str, float] | None = None
    fast_p_compiled: dict[str, float] | None = None


class BenchSummary(BaseModel):
    target: str
    mode: str = Field(description="'verify' (given candidates) or 'generate' (the loop wrote them)")
    problems_dir: str
    candidates_dir: str | None = None
    out: str
    settings: dict[str, Any] = Field(default_factory=dict)
    device: str | None = None
    execution: str | None = None
    judged_now: int = Field(0, description="pairs judged in this run")
    reused: int = Field(0, description="pairs taken from an earlier run's results.jsonl")
    seconds: float = 0.0
    suite: SuiteMetrics
    problems: list[ProblemResult]
    files: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


def _ratio(report: VerifyReport, baseline: str) -> float | None:
    t = report.timing
    base, cand = (getattr(t, baseline), t.candidate) if t else (None, None)
    if base is None or cand is None or cand.median_ms <= 0:
        return None
    return base.median_ms / cand.median_ms


def _first_error(report: VerifyReport) -> str | None:
    for e in report.errors:
        if e and e.strip():
            return e.strip().splitlines()[0][:300]
    for m in report.mismatches[:1]:
        return f"mismatch in trial {m.trial}: {m.reason}"[:300]
    return None


def candidate_result(name: str, report: VerifyReport) -> CandidateResult:
    return CandidateResult(
        candidate=name,
        verdict=report.verdict,
        speedup=report.speedup,
        speedup_eager=_ratio(report, "eager"),
        speedup_compiled=_ratio(report, "compiled"),
        fraction_of_sol=report.fraction_of_sol,
        findings=[f.code for f in report.findings],
        error=None if report.verdict == "pass" else _first_error(report),
    )


def problem_result(
    name: str, path: str, judged: Sequence[tuple[str, VerifyReport]], error: str | None = None
) -> ProblemResult:
    """The best candidate: the best verdict, then the highest speedup over the faster baseline."""
    res = ProblemResult(problem=name, path=path, error=error, candidates=[candidate_result(n, r) for n, r in judged])
    if not judged:
        res.error = res.error or "no candidates for this problem"
        return res
    best_name, best = min(
        judged, key=lambda nr: (VERDICT_RANK.get(nr[1].verdict or "error", 3), -(nr[1].speedup or 0.0))
    )
    res.best_verdict, res.best_candidate, res.correct = best.verdict, best_name, best.verdict == "pass"
    res.speedup, res.speedup_over, res.speedup_ci = best.speedup, best.speedup_over, best.speedup_ci
    res.speedup_eager, res.speedup_compiled = _ratio(best, "eager"), _ratio(best, "compiled")
    res.fraction_of_sol = best.fraction_of_sol
    res.findings = [f.model_dump(mode="json", exclude={"evidence"}) for f in best.findings]
    return res


def fast_p(problems: Sequence[ProblemResult], p: float, field: str = "speedup") -> float:
    """KernelBench's fast_p: the share of all problems whose best candidate is correct and more
    than p times faster than the baseline (p=0: correct at all)."""
    if not problems:
        return 0.0
    hits = [r for r in problems if r.correct and (p == 0 or (getattr(r, field) or 0.0) > p)]
    return len(hits) / len(problems)


def suite_metrics(problems: Sequence[ProblemResult]) -> SuiteMetrics:
    correct = [r for r in problems if r.correct]
    verdicts: dict[str, int] = {}
    for r in problems:
        for c in r.candidates:
            verdicts[c.verdict or "error"] = verdicts.get(c.verdict or "error", 0) + 1

    def curve(field: str) -> dict[str, float] | None:
        if field != "speedup" and not any(getattr(r, field) is not None for r in correct):
            return None  # that baseline was not timed
        return {f"{p:g}": fast_p(problems, p, field) for p in FAST_P}

    return SuiteMetrics(
        problems=len(problems),
        correct=len(correct),
        correctness_rate=len(correct) / len(problems) if problems else 0.0,
        candidates_judged=sum(len(r.candidates) for r in problems),
        verdicts=verdicts,
        geomean_speedup=geomean([r.speedup for r in correct]),
        geomean_speedup_all=geomean([r.speedup if r.correct and r.speedup else 1.0 for r in problems]),
        geomean_speedup_eager=geomean([r.speedup_eager for r in correct]),
        geomean_speedup_compiled=geomean([r.speedup_compiled for r in correct]),
        fast_p=curve("speedup"),
        fast_p_eager=curve("speedup_eager"),
        fast_p_compiled=curve("speedup_compiled"),
    )


@one_at_a_time
def write_plot(summary: BenchSummary, path: Path) -> str | None:
    """bench.png: best speedup per problem (log scale, failures marked) and the fast_p curve.
    Returns why there is no plot, or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (pip install matplotlib); summary.json and the table are complete"
    probs = summary.problems
    fig, (ax, bx) = plt.subplots(
        1, 2, figsize=(max(9.0, 4.5 + 0.45 * len(probs)), 4.6), gridspec_kw={"width_ratios": [max(2, len(probs)), 3]}
    )
    xs = range(len(probs))
    # bars grow from 1.0x (up: faster, down: slower); a problem with no correct candidate gets an x
    ok = [(i, r.speedup) for i, r in enumerate(probs) if r.correct and r.speedup]
    ax.bar(
        [i for i, _ in ok],
        [v - 1.0 for _, v in ok],
        bottom=1.0,
        edgecolor="#555",
        linewidth=0.5,
        color=["#2e7d32" if v >= 1 else "#f9a825" for _, v in ok],
    )
    ax.set_yscale("log")
    vals = [v for _, v in ok] + [1.0]
    ax.set_ylim(min(vals) / 2.5, max(vals) * 2.5)
    ax.axhline(1.0, color="#333", linewidth=0.8, linestyle="--")
    for i, r in enumerate(probs):
        if not (r.correct and r.speedup):
            ax.plot(i, 1.0, marker="x", color="#c62828", markersize=9, mew=2)
            ax.annotate(
                r.best_verdict or "none",
                (i, 1.0),
                textcoords="offset points",
                xytext=(0, -16),
                ha="center",
                fontsize=7,
                color="#c62828",
            )
    ax.set_xlim(-0.6, len(probs) - 0.4)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r.problem[:28] for r in probs], rotation=35, ha="right", fontsize=7)
    ax.set_ylabel("speedup over faster baseline (log)")
    ax.set_title(f"best {summary.target} candidate per problem (x: no correct candidate)", fontsize=9)
    ps = [i / 20 for i in range(81)]
    for field, label, style in (
        ("speedup", "faster baseline", "-"),
        ("speedup_eager", "eager", "--"),
        ("speedup_compiled", "torch.compile", ":"),
    ):
        if field == "speedup" or any(getattr(r, field) is not None for r in probs if r.correct):
            bx.step(ps, [fast_p(probs, p, field) for p in ps], where="post", linestyle=style, label=f"vs {label}")
    bx.set_xlabel("p (speedup threshold)")
    bx.set_ylabel("fast_p")
    bx.set_ylim(-0.02, 1.02)
    bx.set_xlim(0, 4)
    bx.grid(alpha=0.3)
    bx.legend(fontsize=8)
    bx.set_title(f"fast_p over {len(probs)} problems", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def write_html(summary: BenchSummary, path: Path, png: Path | None) -> None:
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("kforge_mcp", "templates"), autoescape=select_autoescape(["html", "j2"]))
    image = base64.b64encode(png.read_bytes()).decode() if png is not None and png.is_file() else None
    path.write_text(env.get_template("bench.html.j2").render(s=summary, image=image, fmt=_fmt))


def write_files(summary: BenchSummary, out: Path, plot: bool) -> None:
    """summary.json, and with ``plot`` bench.png and bench.html, under ``out``."""
    if plot:
        why = write_plot(summary, out / PNG)
        if why:
            summary.notes.append(why)
        else:
            summary.files["png"] = str(out / PNG)
        write_html(summary, out / HTML, None if why else out / PNG)
        summary.files["html"] = str(out / HTML)
    (out / SUMMARY).write_text(summary.model_dump_json(indent=2) + "\n")
