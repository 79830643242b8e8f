"""The KForge loop: a generation agent writes a candidate, repairs it from compile, runtime and
mismatch feedback until it is correct (functional passes), then makes it faster from the profile
and the performance-analysis agent's advice (optimization passes), keeping the best correct
candidate by speedup.

The loop's state lives in the run store, not in this object: the next prompt is computed from the
attempts recorded so far. So the same code serves the headless driver (``LoopDriver.run`` over a
``generate(prompt) -> reply`` callable), the client-driven tools (``start`` / ``submit``: the
client's model writes each reply) and ``resume`` of a run whose process died.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Literal

from pydantic import BaseModel, Field

from ..errors import InputError, KforgeError
from ..problem import resolve_source
from ..schemas import JobAware
from ..store import Attempt, Run, RunStore
from . import prompts
from .extract import ExtractionError, extract_candidate

Generate = Callable[[str], str]
Progress = Callable[[str], None] | None


class LoopOptions(BaseModel):
    max_iterations: int = Field(8, ge=1, le=200, description="attempts in all, functional and optimization")
    max_seconds: float | None = Field(None, gt=0, description="wall-time budget; checked between attempts")
    stop_at_sol: float | None = Field(0.9, gt=0, description="stop once a correct candidate reaches this fraction "
                                      "of speed of light (when the device's peaks are known)")  # fmt: skip
    optimize: bool = Field(True, description="after the first correct candidate, keep optimizing")
    profile: bool = Field(True, description="profile correct candidates and feed the analysis agent's advice back")
    profile_depth: Literal["timeline", "metrics"] = "timeline"
    device: str | None = None
    trials: int = Field(5, ge=1, le=100)
    atol: float | None = None
    rtol: float | None = None
    baselines: list[Literal["eager", "compiled"]] = Field(default_factory=lambda: ["eager", "compiled"])
    timing_budget_s: float = Field(1.0, gt=0)
    timeout_s: float = Field(300.0, gt=0)
    reference_impl: str | None = Field(None, description="a correct implementation for another target to port")
    reference_target: str | None = None


class AttemptSummary(BaseModel):
    index: int
    pass_: str = Field(alias="pass", serialization_alias="pass")
    verdict: str | None = Field(None, description="pass, fail, suspicious, error; 'no_code' when nothing was extracted, "
                                "'compile_error' when it did not compile")  # fmt: skip
    correct: bool = False
    speedup: float | None = None
    problem: str | None = Field(None, description="the first lines of the feedback, when it failed")

    model_config = {"populate_by_name": True}


class BestCandidate(BaseModel):
    index: int
    candidate: str
    speedup: float | None = None
    verify_report: dict[str, Any] | None = None


class LoopResult(BaseModel):
    run_id: str
    status: str = Field(description="running, done, failed or stopped")
    stop_reason: str | None = None
    best: BestCandidate | None = None
    attempts: list[AttemptSummary] = Field(default_factory=list)
    job_id: str | None = Field(None, description="set when run_loop outlived wait_s; poll job_status / job_result")


class SubmitResult(JobAware):
    run_id: str
    attempt: int | None = None
    verdict: str | None = None
    correct: bool = False
    speedup: float | None = None
    error: str | None = Field(None, description="why the reply could not be checked (e.g. no ModelNew)")
    compile_report: dict[str, Any] | None = None
    verify_report: dict[str, Any] | None = None
    recommendations: list[dict[str, Any]] | None = None
    feedback: str | None = Field(None, description="what the next prompt tells the agent about this attempt")
    next_prompt: str | None = Field(None, description="the prompt for the next attempt; None when done")
    done: bool = False
    stop_reason: str | None = None
    best: BestCandidate | None = None


# ---- feedback: reports turned into text a generation agent can act on ----


def _source_line(source: str | None, line: int | None) -> str | None:
    if not source or not line:
        return None
    lines = source.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else None


def _diagnostics_text(diags: list[dict], source: str | None) -> list[str]:
    out = []
    for d in diags[:10]:
        where = f"line {d['line']}" + (f", column {d['column']}" if d.get("column") else "") if d.get("line") else "candidate"
        out.append(f"- {where}: {d.get('severity', 'error')}: {d['message']}")
        src = _source_line(source, d.get("line"))
        if src is not None:
            out.append(f"    {src.strip()}")
    return out


def _g(v) -> str:
    return "?" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)


def failure_feedback(attempt: Attempt) -> str:
    """Why an attempt is not (yet) acceptable, in the words the repair prompt uses."""
    if attempt.error:
        return f"Your reply could not be used: {attempt.error}"
    lines: list[str] = []
    c = attempt.compile_report
    if c is not None and not c.get("ok"):
        lines.append("It did not compile:")
        lines += _diagnostics_text(c.get("diagnostics", []), attempt.candidate)
        return "\n".join(lines)
    v = attempt.verify_report or {}
    verdict = v.get("verdict")
    if verdict == "error":
        lines.append("It compiled but failed at run time:")
        lines += _diagnostics_text(v.get("diagnostics", []), attempt.candidate)
        lines += [f"- {e.strip()[-1500:]}" for e in v.get("errors", []) if e and e.strip()][:4]
    elif verdict == "fail":
        lines.append("It ran but its outputs do not match the reference:")
        for m in v.get("mismatches", [])[:4]:
            at = f" first mismatch at index {m['first_mismatch_index']}" if m.get("first_mismatch_index") is not None else ""
            lines.append(f"- trial {m['trial']}, output {m.get('output_index', 0)}: {m['reason']};{at} expected "
                         f"{_g(m.get('expected'))}, got {_g(m.get('got'))}; max_abs_error {_g(m.get('max_abs_error'))}, "
                         f"mean_abs_error {_g(m.get('mean_abs_error'))}, max_rel_error {_g(m.get('max_rel_error'))}, "
                         f"mismatched fraction {_g(m.get('mismatched_fraction'))} (atol {_g(m.get('atol'))}, "
                         f"rtol {_g(m.get('rtol'))})")  # fmt: skip
    elif verdict == "suspicious":
        lines.append("It matched the reference but was flagged as suspicious (it must do the work in its own kernels):")
    if verdict in ("fail", "suspicious", "error"):
        for f in v.get("findings", []):
            if f.get("severity") in ("suspicious", "fail"):
                lines.append(f"- {f['code']}: {f['message']}")
    return "\n".join(lines) or f"It was not accepted (verdict {verdict})."


def optimize_feedback(best: Attempt, last: Attempt | None) -> str:
    """Measurements of the best candidate and the analysis agent's advice (and why the last try failed)."""
    v = best.verify_report or {}
    lines = []
    t = (v.get("timing") or {})
    cand = (t.get("candidate") or {}).get("median_ms")
    base = v.get("speedup_over")
    base_ms = (t.get(base) or {}).get("median_ms") if base else None
    lines.append(f"Speedup {_g(v.get('speedup'))}x over {base or 'the baseline'} (candidate {_g(cand)} ms, "
                 f"baseline {_g(base_ms)} ms).")  # fmt: skip
    if v.get("fraction_of_sol") is not None:
        lines.append(f"It runs at {v['fraction_of_sol']:.0%} of the speed of light (T_SOL {_g(v.get('sol_ms'))} ms).")
    for f in v.get("findings", []):
        if f.get("code") == "interpreter_timing":
            lines.append(f"Note: {f['message']}")
    recs = best.recommendations or []
    summary = next((r.get("_summary") for r in recs if "_summary" in r), None)
    if summary:
        lines.append(f"Profile: {summary}")
    real = [r for r in recs if "_summary" not in r]
    if real:
        lines.append("Recommendations, highest priority first:")
        for i, r in enumerate(real[:5], 1):
            gain = r.get("expected_gain")
            lines.append(f"{i}. {r.get('title')} ({r.get('priority', '?')} priority"
                         + (f", ~{gain:.0%} of device time" if isinstance(gain, (int, float)) else "") + ")")  # fmt: skip
            if r.get("evidence"):
                ev = r["evidence"]
                ev = "; ".join(f"{e.get('metric')}={_g(e.get('value'))}" if isinstance(e, dict) else str(e) for e in ev) \
                    if isinstance(ev, list) else str(ev)  # fmt: skip
                lines.append(f"   evidence: {ev[:400]}")
            if r.get("action"):
                lines.append(f"   action: {r['action']}")
    else:
        lines.append("The analysis agent had no specific recommendation for this profile.")
    if last is not None and last.index != best.index:
        if last.correct:
            lines.append(f"Your last attempt ({last.index}) was correct but not faster (speedup {_g(last.speedup)}x); "
                         "it was not kept.")  # fmt: skip
        else:
            lines.append(f"Your last attempt ({last.index}) was discarded:\n" + failure_feedback(last))
    return "\n".join(lines)


def summarize(a: Attempt) -> AttemptSummary:
    if a.error:
        verdict, problem = "no_code", a.error
    elif a.compile_report is not None and not a.compile_report.get("ok"):
        verdict, problem = "compile_error", failure_feedback(a)
    else:
        verdict = (a.verify_report or {}).get("verdict")
        problem = None if a.correct else failure_feedback(a)
    return AttemptSummary(index=a.index, pass_=a.pass_, verdict=verdict, correct=a.correct, speedup=a.speedup,
                          problem=problem[:500] if problem else None)  # fmt: skip


def resolve(engine, value: str, role: str):
    """Source text, or a .py path checked by the engine's path policy (allowed directories) when it has one."""
    fn = getattr(engine, "resolve_source", None)
    return fn(value, role) if fn is not None else resolve_source(value, role)


def _best_of(attempts: list[Attempt]) -> Attempt | None:
    correct = [a for a in attempts if a.correct]
    return max(correct, key=lambda a: (a.speedup or 0.0, -a.index)) if correct else None


class LoopDriver:
    """Runs and records loops for one engine. Thread-safe: every call reads the store afresh."""

    def __init__(self, engine, store: RunStore | None = None):
        self.engine = engine
        self.store = store or RunStore.for_home(engine.home)
        self._run_locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def _lock(self, run_id: str) -> threading.Lock:
        with self._locks_lock:
            return self._run_locks.setdefault(run_id, threading.Lock())

    # ---- starting and prompting ----

    def start(self, problem: str, target: str, provider: str | None = None, options: LoopOptions | dict | None = None) -> Run:
        opts = options if isinstance(options, LoopOptions) else LoopOptions.model_validate(options or {})
        prob = resolve(self.engine, problem, "problem")
        prompts.render("first", target, prob.text)  # fails early (InputError) for a target without templates
        self.engine.target_status(target)  # unknown target names fail here
        return self.store.create_run(prob.text, target, provider=provider, problem_name=prob.name,
                                     options=opts.model_dump(mode="json"))  # fmt: skip

    def options(self, run: Run) -> LoopOptions:
        return LoopOptions.model_validate(run.options)

    def _device_facts(self, target: str) -> str:
        try:
            return prompts.device_facts(target, self.engine.target_status(target))
        except KforgeError:
            return prompts.device_facts(target)

    def next_prompt(self, run_id: str) -> tuple[str, str]:
        """(pass, prompt) for the run's next attempt, computed from the attempts so far."""
        run = self.store.get_run(run_id)
        opts = self.options(run)
        attempts = self.store.attempts(run_id)
        common = dict(device=self._device_facts(run.target), reference_impl=opts.reference_impl,
                      reference_target=opts.reference_target)  # fmt: skip
        if not attempts:
            return "functional", prompts.render("first", run.target, run.problem, **common)
        last, best = attempts[-1], _best_of(attempts)
        if best is None:
            previous = last.candidate or last.reply or ""
            return "functional", prompts.render("repair", run.target, run.problem, previous=previous,
                                                feedback=failure_feedback(last), attempt_index=last.index, **common)  # fmt: skip
        return "optimize", prompts.render("optimize", run.target, run.problem, previous=best.candidate,
                                          feedback=optimize_feedback(best, last), attempt_index=best.index,
                                          speedup=best.speedup, **common)  # fmt: skip

    # ---- one attempt ----

    def submit(self, run_id: str, reply: str, prompt: str | None = None, on_progress: Progress = None,
               cancel: threading.Event | None = None) -> SubmitResult:  # fmt: skip
        """Check one reply (a raw LLM reply or bare candidate source) and record it as the next attempt."""
        with self._lock(run_id):
            run = self.store.get_run(run_id)
            if run.status != "running":
                raise InputError(f"run '{run_id}' is {run.status} ({run.stop_reason}); start a new run or resume it")
            pass_, expected_prompt = self.next_prompt(run_id)
            attempt = self._check(run, pass_, prompt or expected_prompt, reply, on_progress, cancel)
            return self._after_attempt(run, attempt)

    def _check(self, run: Run, pass_: str, prompt: str, reply: str, on_progress: Progress,
               cancel: threading.Event | None) -> Attempt:  # fmt: skip
        opts = self.options(run)
        say = on_progress or (lambda _m: None)
        n = run.attempts
        try:
            code = extract_candidate(reply).code
        except ExtractionError as e:
            return self.store.add_attempt(run.id, pass_, prompt=prompt, reply=reply, error=str(e))
        say(f"attempt {n}: compiling")
        try:
            comp = self.engine.compile(run.target, code, problem=run.problem, timeout_s=opts.timeout_s, cancel=cancel)
        except InputError as e:  # e.g. no ModelNew: the agent's fault, so it is feedback, not a tool error
            return self.store.add_attempt(run.id, pass_, prompt=prompt, reply=reply, candidate=code, error=str(e))
        if not comp.ok:
            return self.store.add_attempt(run.id, pass_, prompt=prompt, reply=reply, candidate=code,
                                          compile_report=comp.model_dump(mode="json"))  # fmt: skip
        say(f"attempt {n}: verifying")
        try:
            ver = self.engine.verify(run.problem, code, target=run.target, device=opts.device, trials=opts.trials,
                                     atol=opts.atol, rtol=opts.rtol, timeout_s=opts.timeout_s, baselines=opts.baselines,
                                     timing_budget_s=opts.timing_budget_s, on_progress=on_progress, cancel=cancel)  # fmt: skip
        except InputError as e:
            return self.store.add_attempt(run.id, pass_, prompt=prompt, reply=reply, candidate=code,
                                          compile_report=comp.model_dump(mode="json"), error=str(e))  # fmt: skip
        correct = ver.verdict == "pass"
        recs = None
        if correct and opts.optimize and opts.profile:
            say(f"attempt {n}: profiling")
            recs = self._advice(run, code, opts, cancel)
        return self.store.add_attempt(run.id, pass_, prompt=prompt, reply=reply, candidate=code,
                                      compile_report=comp.model_dump(mode="json"),
                                      verify_report=ver.model_dump(mode="json"), recommendations=recs,
                                      speedup=ver.speedup, correct=correct)  # fmt: skip

    def _advice(self, run: Run, code: str, opts: LoopOptions, cancel) -> list[dict]:
        """The analysis agent's recommendations for a correct candidate, plus its summary line."""
        try:
            prof = self.engine.profile(run.problem, code, target=run.target, device=opts.device,
                                       depth=opts.profile_depth, iterations=3, timeout_s=opts.timeout_s, cancel=cancel)  # fmt: skip
            if prof.errors:
                return [{"_summary": "profiling failed: " + "; ".join(e for e in prof.errors if e)[:500]}]
            analysis = self.engine.analyze_profile(profile=prof.model_dump(mode="json"), problem=run.problem)
        except KforgeError as e:
            return [{"_summary": f"profiling failed: {e}"}]
        recs = [r.model_dump(mode="json") for r in analysis.recommendations]
        return recs + [{"_summary": analysis.summary}]

    def _after_attempt(self, run: Run, attempt: Attempt) -> SubmitResult:
        opts = self.options(run)
        attempts = self.store.attempts(run.id)
        best = _best_of(attempts)
        if best is not None:
            self.store.update_run(run.id, best_attempt=best.index)
        stop = self._stop_reason(run, opts, attempts, best)
        if stop:
            self.store.update_run(run.id, status="done", stop_reason=stop)
        summary = summarize(attempt)
        feedback = summary.problem if not attempt.correct else (optimize_feedback(attempt, None) if not stop else None)
        next_prompt = None if stop else self.next_prompt(run.id)[1]
        return SubmitResult(run_id=run.id, attempt=attempt.index, verdict=summary.verdict, correct=attempt.correct,
                            speedup=attempt.speedup, error=attempt.error, compile_report=attempt.compile_report,
                            verify_report=attempt.verify_report, recommendations=attempt.recommendations,
                            feedback=feedback, next_prompt=next_prompt, done=stop is not None, stop_reason=stop,
                            best=self._best_model(best))  # fmt: skip

    def _stop_reason(self, run: Run, opts: LoopOptions, attempts: list[Attempt], best: Attempt | None) -> str | None:
        if best is not None:
            if not opts.optimize:
                return "correct"
            frac = (best.verify_report or {}).get("fraction_of_sol")
            if opts.stop_at_sol and frac is not None and frac >= opts.stop_at_sol:
                return f"reached {frac:.0%} of speed of light"
        if len(attempts) >= opts.max_iterations:
            return "max_iterations"
        if opts.max_seconds and time.time() - run.created >= opts.max_seconds:
            return "max_seconds"
        return None

    @staticmethod
    def _best_model(best: Attempt | None) -> BestCandidate | None:
        if best is None:
            return None
        return BestCandidate(index=best.index, candidate=best.candidate, speedup=best.speedup,
                             verify_report=best.verify_report)  # fmt: skip

    # ---- results ----

    def result(self, run_id: str) -> LoopResult:
        run = self.store.get_run(run_id)
        attempts = self.store.attempts(run_id)
        best = _best_of(attempts)
        return LoopResult(run_id=run.id, status=run.status, stop_reason=run.stop_reason, best=self._best_model(best),
                          attempts=[summarize(a) for a in attempts])  # fmt: skip

    def stop(self, run_id: str, status: str = "stopped", reason: str | None = None) -> None:
        self.store.update_run(run_id, status=status, stop_reason=reason)

    # ---- the headless driver ----

    def drive(self, run_id: str, generate: Generate, on_progress: Progress = None,
              cancel: threading.Event | None = None) -> LoopResult:  # fmt: skip
        """Generate and check attempts until the run stops. Works for a new run and for one that
        was interrupted: it continues from the attempts already recorded."""
        say = on_progress or (lambda _m: None)
        while True:
            run = self.store.get_run(run_id)
            if run.status != "running":
                break
            if cancel is not None and cancel.is_set():
                self.stop(run_id, "stopped", "cancelled")
                break
            pass_, prompt = self.next_prompt(run_id)
            say(f"attempt {run.attempts} ({pass_}): asking the generation agent")
            try:
                reply = generate(prompt)
            except Exception as e:  # noqa: BLE001  (a provider failure ends the run, recorded, not a crash)
                self.stop(run_id, "failed", f"generation failed: {type(e).__name__}: {str(e)[:300]}")
                break
            try:
                res = self.submit(run_id, reply, prompt=prompt, on_progress=on_progress, cancel=cancel)
            except KforgeError as e:
                self.stop(run_id, "failed", f"checking the attempt failed: {e}")
                break
            best = f", best speedup {_g(res.best.speedup)}x" if res.best else ""
            say(f"attempt {res.attempt}: {res.verdict}{best}")
            if res.done:
                break
        return self.result(run_id)

    def run(self, problem: str, target: str, generate: Generate, provider: str | None = None,
            options: LoopOptions | dict | None = None, on_progress: Progress = None,
            cancel: threading.Event | None = None) -> LoopResult:  # fmt: skip
        run = self.start(problem, target, provider=provider, options=options)
        return self.drive(run.id, generate, on_progress=on_progress, cancel=cancel)

    def resume(self, run_id: str, generate: Generate, on_progress: Progress = None,
               cancel: threading.Event | None = None, **more_options) -> LoopResult:  # fmt: skip
        """Continue a run from its last attempt (after a crash, a cancel, or with a larger budget)."""
        run = self.store.get_run(run_id)
        opts = self.options(run).model_copy(update=more_options)
        self.store.update_run(run_id, status="running", stop_reason=None, options=opts.model_dump(mode="json"))
        return self.drive(run_id, generate, on_progress=on_progress, cancel=cancel)


def run_loop(problem: str, target: str = "triton", generate: Generate | None = None, *, engine=None,
             provider: str | None = None, max_iterations: int = 8, on_progress: Progress = None,
             **options) -> LoopResult:  # fmt: skip
    """The whole loop headless: ``generate(prompt) -> reply`` plays the generation agent (or pass
    ``provider='anthropic'|'openai'`` to use one from ``kforge_mcp.agents.providers``)."""
    from ..api import default_engine

    if generate is None:
        if provider is None:
            raise InputError("run_loop needs generate=callable(prompt) -> reply, or provider='anthropic' or 'openai'")
        from .providers import make_provider

        generate = make_provider(provider)
    driver = LoopDriver(engine or default_engine())
    opts = LoopOptions.model_validate({"max_iterations": max_iterations, **options})
    return driver.run(problem, target, generate, provider=provider or "callable", options=opts, on_progress=on_progress)


__all__ = ["LoopDriver", "LoopOptions", "LoopResult", "SubmitResult", "run_loop"]
