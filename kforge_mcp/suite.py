"""``kforge bench``: judge a suite of problems and candidates (KernelBench layout) and score it.

Layout: every ``*.py`` in the problems folder is a problem (a KernelBench ``level1`` folder works as
it is); its candidates are ``<candidates>/<problem stem>/*.py`` or, flat, ``<candidates>/<problem
stem>.py``. A candidate file whose name is a target's name or starts with it and ``_`` or ``-``
(``triton.py``, ``triton_naive.py``, ``cuda-v2.py``) belongs to that target and is judged only
under it; any other file (``sample_0.py``) is judged under the target asked for.

Results go to ``<out>/results.jsonl`` as each pair finishes, keyed by both files' paths and
contents, the target and the settings, so a rerun judges only what is new or changed.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import math
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

from pydantic import BaseModel, Field

from .errors import InputError
from .problem import REQUIRED_PROBLEM_NAMES, check_allowed_path, default_allowed_roots
from .schemas import VerifyReport

FAST_P = (0.0, 1.0, 1.5, 2.0)
VERDICT_RANK = {"pass": 0, "suspicious": 1, "fail": 2, "error": 3}
TARGET_NAMES = ("cuda", "cute", "triton", "metal")  # kforge_mcp.targets.TARGETS, without importing the targets
RESULTS, SUMMARY, PNG, HTML = "results.jsonl", "summary.json", "bench.png", "bench.html"

Progress = Callable[[int, int, str], None] | None  # (done, total, message)


# ---- the summary's shape ----


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


# ---- discovery ----


def natural_key(name: str) -> list:
    """``2_x`` before ``10_x``, as KernelBench numbers its problems."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name)]


def candidate_target(filename: str) -> str | None:
    """The target a candidate file names by its prefix, or None (judged under the target asked for)."""
    stem = Path(filename).stem.lower()
    for t in TARGET_NAMES:
        if stem == t or stem.startswith((t + "_", t + "-")):
            return t
    return None


def problem_error(path: Path) -> str | None:
    """A cheap static check, so a broken problem is one clear error and costs no worker time."""
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as e:
        return f"{path}:{e.lineno}: syntax error: {e.msg}"
    except (OSError, UnicodeDecodeError) as e:
        return f"{path}: cannot read: {e}"
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in node.names):
                return None  # a star import may bind anything: let the worker decide
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    missing = [n for n in REQUIRED_PROBLEM_NAMES if n not in bound]
    return f"{path}: not a KernelBench problem: it does not define {', '.join(missing)}" if missing else None


class PlannedProblem(BaseModel):
    name: str
    path: str
    error: str | None = None
    candidates: list[str] = Field(default_factory=list, description="absolute paths")
    other_targets: list[str] = Field(default_factory=list, description="files left out: another target's")


def discover(problems_dir: Path | str, candidates_dir: Path | str | None, target: str) -> list[PlannedProblem]:
    problems_dir = Path(problems_dir)
    if problems_dir.is_file():
        files = [problems_dir]
    elif problems_dir.is_dir():
        files = [p for p in problems_dir.glob("*.py") if not p.name.startswith("_")]
    else:
        raise InputError(f"--problems: no such folder: {problems_dir}")
    if not files:
        raise InputError(f"--problems: no problem files (*.py) in {problems_dir}")
    cand_root = Path(candidates_dir) if candidates_dir is not None else None
    if cand_root is not None and not cand_root.is_dir():
        raise InputError(f"--candidates: no such folder: {cand_root}")
    plan = []
    for path in sorted(files, key=lambda p: natural_key(p.name)):
        entry = PlannedProblem(name=path.stem, path=str(path.resolve()), error=problem_error(path))
        if cand_root is not None:
            folder, flat = cand_root / path.stem, cand_root / f"{path.stem}.py"
            found = (
                sorted(folder.glob("*.py"), key=lambda p: natural_key(p.name))
                if folder.is_dir()
                else [flat]
                if flat.is_file()
                else []
            )
            for f in found:
                owner = candidate_target(f.name)
                if owner is None or owner == target:
                    entry.candidates.append(str(f.resolve()))
                else:
                    entry.other_targets.append(f.name)
        plan.append(entry)
    return plan


# ---- results.jsonl: what is done ----


def _sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def pair_key(problem: str, candidate: str, target: str, settings: dict) -> str:
    """Paths, both files' contents, target and settings: a changed file or setting is judged again."""
    blob = json.dumps(
        {
            "problem": problem,
            "problem_sha": _sha(problem),
            "candidate": candidate,
            "candidate_sha": _sha(candidate) if Path(candidate).is_file() else None,
            "target": target,
            "settings": settings,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def load_results(path: Path) -> dict[str, dict]:
    done: dict[str, dict] = {}
    if not path.is_file():
        return done
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
            done[rec["key"]] = rec  # the latest line for a key wins
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by an interrupted run: that pair is judged again
    return done


class ResultLog:
    def __init__(self, path: Path):
        self.path, self.lock = path, threading.Lock()

    def append(self, rec: dict) -> None:
        with self.lock, self.path.open("a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()


# ---- metrics ----


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


def geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


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


# ---- plots and page ----


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


def _fmt(value, spec: str = ".3g", suffix: str = "") -> str:
    return "-" if value is None else f"{format(value, spec)}{suffix}"


# ---- the run ----


def run_bench(
    problems: str | Path,
    candidates: str | Path | None = None,
    target: str = "triton",
    out: str | Path = "kforge-bench",
    *,
    engine=None,
    generate: Callable[[str], str] | None = None,
    provider: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    iterations: int = 8,
    device: str | None = None,
    trials: int = 5,
    timeout_s: float = 300.0,
    baselines: Sequence[str] = ("eager", "compiled"),
    timing_budget_s: float = 1.0,
    plot: bool = True,
    on_progress: Progress = None,
    cancel: threading.Event | None = None,
) -> BenchSummary:
    """Judge every candidate of every problem (or, with ``generate``/``provider``, run the loop
    per problem) and write ``results.jsonl``, ``summary.json``, ``bench.png`` and ``bench.html``
    under ``out``. Crashing, hanging or cheating candidates are failures, never the end of the run."""
    started = time.perf_counter()
    if target not in TARGET_NAMES:
        raise InputError(f"unknown target '{target}'; known targets: {', '.join(TARGET_NAMES)}")
    gen_mode = generate is not None or provider is not None
    if candidates is None and not gen_mode:
        raise InputError("run_bench needs candidates (a folder), or generate / provider to write them")
    plan = discover(problems, None if gen_mode else candidates, target)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    settings = {
        "mode": "generate" if gen_mode else "verify",
        "device": device,
        "trials": trials,
        "baselines": sorted(baselines),
        "timing_budget_s": timing_budget_s,
    }
    if gen_mode:
        settings.update(provider=provider or "callable", model=model, iterations=iterations)
    if gen_mode and generate is None:
        from .agents.providers import make_provider

        generate = make_provider(provider, model=model, base_url=base_url)

    own_engine = engine is None
    if own_engine:
        from .api import Engine

        roots = [Path(problems).resolve(), out.resolve()] + ([Path(candidates).resolve()] if candidates else [])
        engine = Engine(allow_dirs=default_allowed_roots() + roots)
    try:
        for folder, role in ((problems, "problems"), (None if gen_mode else candidates, "candidates")):
            if folder is not None:  # the engine reads only under its allow_dirs: say so once, not per pair
                check_allowed_path(Path(folder), role, engine.allow_dirs)
        status = engine.target_status(target)
        if not status.available:
            raise InputError(f"target '{target}' is not available here: {status.reason}")
        done = load_results(out / RESULTS)
        log = ResultLog(out / RESULTS)
        opts = {
            "generate": generate,
            "iterations": iterations,
            "device": device,
            "trials": trials,
            "timeout_s": timeout_s,
            "baselines": list(baselines),
            "timing_budget_s": timing_budget_s,
            "on_progress": on_progress,
            "cancel": cancel,
        }
        run = _GenerateRun if gen_mode else _VerifyRun
        judged_now, reused, records = run(engine, plan, target, out, settings, done, log, opts).go()
    finally:
        if own_engine:
            engine.close()

    results = []
    for p in plan:
        order = {c: i for i, c in enumerate(p.candidates)}  # the plan's order, not the order they finished in
        recs = sorted(records.get(p.name, []), key=lambda rec: order.get(rec["candidate_path"], 0))
        judged = [
            (_rel(rec["candidate_path"], candidates, out), VerifyReport.model_validate(rec["report"])) for rec in recs
        ]
        results.append(problem_result(p.name, p.path, judged, p.error))
    reports = [VerifyReport.model_validate(r["report"]) for recs in records.values() for r in recs]
    ran = next((r for r in reports if r.device), None)
    summary = BenchSummary(
        target=target,
        mode=settings["mode"],
        problems_dir=str(Path(problems).resolve()),
        candidates_dir=str(Path(candidates).resolve()) if candidates and not gen_mode else None,
        out=str(out.resolve()),
        settings=settings,
        device=ran.device if ran else None,
        execution=ran.execution if ran else None,
        judged_now=judged_now,
        reused=reused,
        seconds=round(time.perf_counter() - started, 2),
        suite=suite_metrics(results),
        problems=results,
        files={"results": str(out / RESULTS), "summary": str(out / SUMMARY)},
    )
    if summary.execution == "triton-interpreter":
        summary.notes.append("kernels ran in Triton's CPU interpreter: the speedups say nothing about a GPU")
    if plot:
        why = write_plot(summary, out / PNG)
        if why:
            summary.notes.append(why)
        else:
            summary.files["png"] = str(out / PNG)
        write_html(summary, out / HTML, None if why else out / PNG)
        summary.files["html"] = str(out / HTML)
    (out / SUMMARY).write_text(summary.model_dump_json(indent=2) + "\n")
    return summary


def _rel(path: str, root, out: Path) -> str:
    for base in (b for b in (root, out) if b is not None):
        try:
            return str(Path(path).relative_to(Path(base).resolve()))
        except ValueError:
            continue
    return path


class _Run:
    """Shared by both modes: which pairs are done, recording each as it finishes."""

    def __init__(self, engine, plan, target, out, settings, done, log, opts):
        self.engine, self.plan, self.target, self.out = engine, plan, target, out
        self.settings, self.done, self.log, self.o = settings, done, log, opts
        self.records: dict[str, list[dict]] = {}
        self.lock = threading.Lock()
        self.count = [0, 0]  # finished, total

    def record(
        self,
        problem: PlannedProblem,
        candidate_path: str,
        key: str,
        report: VerifyReport,
        extra: dict | None = None,
        fresh: bool = True,
    ) -> None:
        rec = {
            "key": key,
            "problem": problem.name,
            "problem_path": problem.path,
            "candidate_path": candidate_path,
            "target": self.target,
            "settings": self.settings,
            "finished_at": time.time(),
            **(extra or {}),
            "report": report.model_dump(mode="json"),
        }
        if fresh and report.errors != ["cancelled"]:  # a cancelled pair is not done: a rerun judges it
            self.log.append(rec)
        with self.lock:
            self.records.setdefault(problem.name, []).append(rec)
            self.count[0] += 1
            if fresh and self.o["on_progress"]:
                name = Path(candidate_path).name
                self.o["on_progress"](self.count[0], self.count[1], f"{problem.name}/{name}: {report.verdict}")

    def reuse(self, problem: PlannedProblem, rec: dict) -> None:
        self.record(
            problem,
            rec["candidate_path"],
            rec["key"],
            VerifyReport.model_validate(rec["report"]),
            {k: v for k, v in rec.items() if k in ("run_id",)},
            fresh=False,
        )


class _VerifyRun(_Run):
    def go(self) -> tuple[int, int, dict]:
        todo: list[tuple[PlannedProblem, str, str]] = []
        for p in self.plan:  # problem-major order: a worker reuses the problem's torch.compile baseline
            if p.error:
                continue
            for c in p.candidates:
                key = pair_key(p.path, c, self.target, self.settings)
                if key in self.done:
                    self.reuse(p, self.done[key])
                else:
                    todo.append((p, c, key))
        reused = self.count[0]
        self.count[1] = reused + len(todo)
        if self.o["on_progress"]:
            self.o["on_progress"](reused, self.count[1], f"{reused} done before, {len(todo)} to judge")
        items = [{"problem": p.path, "candidate": c} for p, c, _ in todo]
        self.engine.verify_batch(
            items,
            on_result=lambda i, r: self.record(todo[i][0], todo[i][1], todo[i][2], r),
            cancel=self.o["cancel"],
            target=self.target,
            device=self.o["device"],
            trials=self.o["trials"],
            timeout_s=self.o["timeout_s"],
            baselines=list(self.o["baselines"]),
            timing_budget_s=self.o["timing_budget_s"],
        )
        return len(todo), reused, self.records


class _GenerateRun(_Run):
    """One loop per problem (as many at once as the executor has workers); its best candidate is
    written to ``<out>/generated/<problem>/<target>_loop.py`` and judged like a given one."""

    def go(self) -> tuple[int, int, dict]:
        todo = []
        for p in self.plan:
            if p.error:
                continue
            key = pair_key(p.path, p.path, self.target, self.settings)  # one entry per problem
            if key in self.done:
                self.reuse(p, self.done[key])
            else:
                todo.append((p, key))
        reused = self.count[0]
        self.count[1] = reused + len(todo)
        if self.o["on_progress"]:
            self.o["on_progress"](reused, self.count[1], f"{reused} done before, {len(todo)} to generate")
        width = min(len(todo), self.engine.parallelism(self.target, self.o["device"])) if todo else 1
        with ThreadPoolExecutor(max_workers=width, thread_name_prefix="kforge-bench") as ex:
            list(ex.map(lambda pk: self.one(*pk), todo))
        return len(todo), reused, self.records

    def one(self, p: PlannedProblem, key: str) -> None:
        from .agents.loop import run_loop

        dest = self.out / "generated" / p.name / f"{self.target}_loop.py"
        cancel = self.o["cancel"]
        if cancel is not None and cancel.is_set():
            return self.record(p, str(dest), key, VerifyReport(verdict="error", correct=False, errors=["cancelled"]))
        try:
            res = run_loop(
                p.path,
                self.target,
                self.o["generate"],
                engine=self.engine,
                provider=self.settings["provider"],
                max_iterations=self.o["iterations"],
                device=self.o["device"],
                trials=self.o["trials"],
                baselines=list(self.o["baselines"]),
                timeout_s=self.o["timeout_s"],
                timing_budget_s=self.o["timing_budget_s"],
            )
        except Exception as e:  # noqa: BLE001  (a loop that dies is this problem's failure, not the suite's)
            report = VerifyReport(
                verdict="error", correct=False, target=self.target, errors=[f"the loop failed: {type(e).__name__}: {e}"]
            )
            return self.record(p, str(dest), key, report)
        if res.best is not None and res.best.verify_report:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(res.best.candidate)
            report = VerifyReport.model_validate(res.best.verify_report)
        else:  # nothing correct: the problem fails with the best verdict any attempt reached
            seen = [a.verdict for a in res.attempts]
            verdict = next((v for v in ("suspicious", "fail") if v in seen), "error")
            report = VerifyReport(
                verdict=verdict,
                correct=False,
                target=self.target,
                errors=[f"no correct candidate in {len(res.attempts)} attempts: " + ", ".join(str(v) for v in seen)],
            )
        self.record(p, str(dest), key, report, {"run_id": res.run_id})
