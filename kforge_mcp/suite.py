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
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, Field

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.options import BASELINES, VERIFY
from kforge_mcp.core.problem import REQUIRED_PROBLEM_NAMES, check_allowed_path, default_allowed_roots
from kforge_mcp.core.schemas import VerifyReport
from kforge_mcp.engine.parts import engine_settings
from kforge_mcp.suite_report import RESULTS, SUMMARY, BenchSummary, problem_result, suite_metrics, write_files
from kforge_mcp.targets import TARGETS

Progress = Callable[[int, int, str], None] | None  # (done, total, message)


# ---- discovery ----


def natural_key(name: str) -> list:
    """``2_x`` before ``10_x``, as KernelBench numbers its problems."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name)]


def candidate_target(filename: str) -> str | None:
    """The target a candidate file names by its prefix, or None (judged under the target asked for)."""
    stem = Path(filename).stem.lower()
    for t in TARGETS:
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
    trials: int = VERIFY.trials,
    timeout_s: float = VERIFY.timeout_s,
    baselines: Sequence[str] = BASELINES,
    timing_budget_s: float = VERIFY.timing_budget_s,
    plot: bool = True,
    on_progress: Progress = None,
    cancel: threading.Event | None = None,
) -> BenchSummary:
    """Judge every candidate of every problem (or, with ``generate``/``provider``, run the loop
    per problem) and write ``results.jsonl``, ``summary.json``, ``bench.png`` and ``bench.html``
    under ``out``. Crashing, hanging or cheating candidates are failures, never the end of the run."""
    started = time.perf_counter()
    if target not in TARGETS:
        raise InputError(f"unknown target '{target}'; known targets: {', '.join(TARGETS)}")
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
        from kforge_mcp.agents.providers import make_provider

        assert provider is not None  # gen_mode without generate: a provider was named
        generate = make_provider(provider, model=model, base_url=base_url, settings=engine_settings(engine))

    own_engine = engine is None
    if own_engine:
        from kforge_mcp.api import Engine

        roots = [Path(problems).resolve(), out.resolve()] + ([Path(candidates).resolve()] if candidates else [])
        engine = Engine(allow_dirs=default_allowed_roots() + roots)
    try:
        _check_engine(engine, target, problems, None if gen_mode else candidates)
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

    summary = _summary(plan, records, problems, None if gen_mode else candidates, out, target, settings)
    summary.judged_now, summary.reused = judged_now, reused
    summary.seconds = round(time.perf_counter() - started, 2)
    write_files(summary, out, plot)
    return summary


def _check_engine(engine, target: str, problems, candidates) -> None:
    """The engine may read the folders and has the target: said once, not per pair."""
    for folder, role in ((problems, "problems"), (candidates, "candidates")):
        if folder is not None:  # the engine reads only under its allow_dirs
            check_allowed_path(Path(folder), role, engine.allow_dirs)
    status = engine.target_status(target)
    if not status.available:
        raise InputError(f"target '{target}' is not available here: {status.reason}")


def _summary(plan, records: dict, problems, candidates, out: Path, target: str, settings: dict) -> BenchSummary:
    """The run's summary from its records, each problem's candidates in the plan's order (``candidates``: the
    folder judged, None when the loop wrote them)."""
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
        candidates_dir=str(Path(candidates).resolve()) if candidates else None,
        out=str(out.resolve()),
        settings=settings,
        device=ran.device if ran else None,
        execution=ran.execution if ran else None,
        suite=suite_metrics(results),
        problems=results,
        files={"results": str(out / RESULTS), "summary": str(out / SUMMARY)},
    )
    if summary.execution == "triton-interpreter":
        summary.notes.append("kernels ran in Triton's CPU interpreter: the speedups say nothing about a GPU")
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
        from kforge_mcp.agents.loop import run_loop

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
