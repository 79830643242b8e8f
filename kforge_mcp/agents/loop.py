"""The KForge loop: a generation agent writes a candidate, repairs it from compile, runtime and
mismatch feedback until it is correct (functional passes), then makes it faster from the profile
and the performance-analysis agent's advice (optimization passes), keeping the best correct
candidate by speedup.

The loop's state lives in the run store, not in this object: the next prompt is computed from the
attempts recorded so far. So the same code serves the headless driver (``LoopDriver.run`` over a
``generate(prompt) -> reply`` callable, asked for ``candidates_per_round`` replies at once per
round), the client-driven tools (``start`` / ``submit``: the
client's model writes each reply) and ``resume`` of a run whose process died.

A driven run is owned by the driving process (pid, host, heartbeat in the store), so a run whose
process died reads as 'interrupted'. A cancel (job_cancel, the ``cancel`` event) or Ctrl-C marks it
'stopped' with the reason; every drive ends by writing the run's report (run_report.py).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Literal

from pydantic import BaseModel, Field, ValidationError

from ..engine.pool import JobCancelled
from ..errors import InputError, KforgeError
from ..problem import resolve_source
from ..schemas import JobAware
from ..store import HEARTBEAT_S, Attempt, Run, RunStore
from . import prompts
from .extract import ExtractionError, extract_candidate


class Reply(str):
    """A generation agent's reply that also says what it cost: ``Reply(text, tokens=prompt + completion)``.

    It is a str, so code that treats replies as text keeps working. The providers return one with
    the SDK's usage counts; MCP sampling reports no usage, so its replies carry an estimate
    (``estimated=True``)."""

    tokens: int | None
    estimated: bool

    def __new__(cls, text: str, tokens: int | None = None, estimated: bool = False) -> "Reply":
        self = super().__new__(cls, text)
        self.tokens, self.estimated = tokens, estimated
        return self


def estimate_tokens(*texts: str) -> int:
    """About four characters a token: for replies whose generator reports no usage."""
    return (sum(len(t) for t in texts) + 3) // 4


def reply_text_and_tokens(prompt: str, reply: str) -> tuple[str, int]:
    """A generate's answer as (text, tokens): a Reply's own count, else an estimate over prompt and reply."""
    if not isinstance(reply, str):
        raise TypeError(f"generate must return a str (or a Reply), not {type(reply).__name__}")
    tokens = getattr(reply, "tokens", None)
    return str(reply), tokens if tokens is not None else estimate_tokens(prompt, reply)


# generate(prompt) -> reply: a str, or a Reply (a str subclass) carrying the tokens the request cost;
# for a plain str the loop estimates the tokens as len(prompt + reply) / 4. With candidates_per_round > 1
# it is called from several threads at once, so it must be thread-safe (each call one request).
Generate = Callable[[str], str]
Progress = Callable[[str], None] | None
log = logging.getLogger(__name__)

_driving: set[str] = set()  # runs a driver in this process is driving now (the store's owner is the process)
_driving_lock = threading.Lock()


class LoopOptions(BaseModel):
    max_iterations: int = Field(8, ge=1, le=200, description="attempts in all, functional and optimization")
    max_seconds: float | None = Field(None, gt=0, description="wall-time budget; checked between rounds")
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="token budget of the whole run (prompt + completion, all "
        "attempts); checked between rounds. Providers report exact counts; MCP sampling and "
        "plain-str generate callables report none, so there it is estimated as "
        "len(prompt + reply) / 4",
    )
    candidates_per_round: int = Field(
        1,
        ge=1,
        le=16,
        description="replies asked for the same prompt each round "
        "(concurrently), checked side by side as the executor allows; each is an "
        "attempt, and the round's best drives the next prompt",
    )
    stop_at_sol: float | None = Field(
        0.9,
        gt=0,
        description="stop once a correct candidate reaches this fraction "
        "of speed of light (when the device's peaks are known)",
    )
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
    provider_model: str | None = Field(None, description="the provider's model, kept so a resume asks the same one")
    provider_base_url: str | None = Field(None, description="the provider's endpoint, kept for a resume (never a key)")

    model_config = {"extra": "forbid"}  # a misspelt option is an error, not silently the default

    @classmethod
    def parse(cls, options: "LoopOptions | dict | None") -> "LoopOptions":
        if isinstance(options, cls):
            return options
        try:
            return cls.model_validate(options or {})
        except ValidationError as e:
            bad = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())
            raise InputError(f"bad loop option: {bad}") from None


class AttemptSummary(BaseModel):
    index: int
    pass_: str = Field(alias="pass", serialization_alias="pass")
    verdict: str | None = Field(
        None,
        description="pass, fail, suspicious, error; 'no_code' when nothing was extracted, "
        "'compile_error' when it did not compile",
    )
    correct: bool = False
    speedup: float | None = None
    problem: str | None = Field(None, description="the first lines of the feedback, when it failed")
    tokens: int | None = Field(None, description="tokens the reply cost (prompt + completion; estimated for sampling)")
    round: int | None = Field(None, description="the round it was generated in (same prompt, same round)")

    model_config = {"populate_by_name": True}


class BestCandidate(BaseModel):
    index: int
    candidate: str
    speedup: float | None = None
    verify_report: dict[str, Any] | None = None


class LoopResult(BaseModel):
    run_id: str
    status: str = Field(description="running, done, failed, stopped (cancelled) or interrupted (its process died)")
    stop_reason: str | None = None
    best: BestCandidate | None = None
    attempts: list[AttemptSummary] = Field(default_factory=list)
    tokens: int = Field(0, description="tokens spent, summed over the attempts (see LoopOptions.max_tokens)")
    report: str | None = Field(
        None,
        description="path of the run's HTML report (speedup and verdict per attempt, "
        "the best kernel); a PNG of the plot lies beside it",
    )
    report_uri: str | None = Field(None, description="the same report as an MCP resource")
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
        where = (
            f"line {d['line']}" + (f", column {d['column']}" if d.get("column") else "")
            if d.get("line")
            else "candidate"
        )
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
            at = (
                f" first mismatch at index {m['first_mismatch_index']}"
                if m.get("first_mismatch_index") is not None
                else ""
            )
            lines.append(
                f"- trial {m['trial']}, output {m.get('output_index', 0)}: {m['reason']};{at} expected "
                f"{_g(m.get('expected'))}, got {_g(m.get('got'))}; max_abs_error {_g(m.get('max_abs_error'))}, "
                f"mean_abs_error {_g(m.get('mean_abs_error'))}, max_rel_error {_g(m.get('max_rel_error'))}, "
                f"mismatched fraction {_g(m.get('mismatched_fraction'))} (atol {_g(m.get('atol'))}, "
                f"rtol {_g(m.get('rtol'))})"
            )
    elif verdict == "suspicious":
        lines.append("It matched the reference but was flagged as suspicious (it must do the work in its own kernels):")
    if verdict in ("fail", "suspicious", "error"):
        for f in v.get("findings", []):
            if f.get("severity") in ("suspicious", "fail"):
                lines.append(f"- {f['code']}: {f['message']}")
    return "\n".join(lines) or f"It was not accepted (verdict {verdict})."


# kept as on main until the analysis rewrite there merges, then formatted
# fmt: off
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
# fmt: on


def summarize(a: Attempt) -> AttemptSummary:
    if a.error:
        verdict, problem = "no_code", a.error
    elif a.compile_report is not None and not a.compile_report.get("ok"):
        verdict, problem = "compile_error", failure_feedback(a)
    else:
        verdict = (a.verify_report or {}).get("verdict")
        problem = None if a.correct else failure_feedback(a)
    return AttemptSummary(
        index=a.index,
        pass_=a.pass_,
        verdict=verdict,
        correct=a.correct,
        speedup=a.speedup,
        problem=problem[:500] if problem else None,
        tokens=a.tokens,
        round=a.round,
    )


def resolve(engine, value: str, role: str):
    """Source text, or a .py path checked by the engine's path policy (allowed directories) when it has one."""
    fn = getattr(engine, "resolve_source", None)
    return fn(value, role) if fn is not None else resolve_source(value, role)


def _best_of(attempts: list[Attempt]) -> Attempt | None:
    correct = [a for a in attempts if a.correct]
    return max(correct, key=lambda a: (a.speedup or 0.0, -a.index)) if correct else None


# how far a failed attempt got: the furthest one tells the agent the most
_PROGRESS = {"suspicious": 4, "fail": 3, "error": 2, "compile_error": 1, "no_code": 0}


def _last_round(attempts: list[Attempt]) -> list[Attempt]:
    """The attempts of the latest round (one attempt when rounds are not recorded)."""
    key = lambda a: a.index if a.round is None else a.round  # noqa: E731
    last = key(attempts[-1])
    return [a for a in attempts if key(a) == last]


def _round_best(attempts: list[Attempt]) -> Attempt:
    """A round's best: correct and fastest, else the failure that got furthest (the earliest on a tie)."""
    best = _best_of(attempts)
    if best is not None:
        return best
    return max(attempts, key=lambda a: (_PROGRESS.get(summarize(a).verdict or "", 0), -a.index))


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

    def start(
        self, problem: str, target: str, provider: str | None = None, options: LoopOptions | dict | None = None
    ) -> Run:
        opts = LoopOptions.parse(options)
        prob = resolve(self.engine, problem, "problem")
        prompts.render("first", target, prob.text)  # fails early (InputError) for a target without templates
        self.engine.target_status(target)  # unknown target names fail here
        return self.store.create_run(
            prob.text, target, provider=provider, problem_name=prob.name, options=opts.model_dump(mode="json")
        )

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
        common = dict(
            device=self._device_facts(run.target),
            reference_impl=opts.reference_impl,
            reference_target=opts.reference_target,
        )
        if not attempts:
            return "functional", prompts.render("first", run.target, run.problem, **common)
        # the latest round's best (with one candidate per round: the last attempt) is what the feedback is about
        last, best = _round_best(_last_round(attempts)), _best_of(attempts)
        if best is None:
            previous = last.candidate or last.reply or ""
            return "functional", prompts.render(
                "repair",
                run.target,
                run.problem,
                previous=previous,
                feedback=failure_feedback(last),
                attempt_index=last.index,
                **common,
            )
        return "optimize", prompts.render(
            "optimize",
            run.target,
            run.problem,
            previous=best.candidate,
            feedback=optimize_feedback(best, last),
            attempt_index=best.index,
            speedup=best.speedup,
            **common,
        )

    # ---- one attempt ----

    def submit(
        self,
        run_id: str,
        reply: str,
        prompt: str | None = None,
        on_progress: Progress = None,
        cancel: threading.Event | None = None,
    ) -> SubmitResult:
        """Check one reply (a raw LLM reply or bare candidate source) and record it as the next attempt."""
        with self._lock(run_id):
            run = self.store.get_run(run_id)
            if run.status != "running":
                raise InputError(f"run '{run_id}' is {run.status} ({run.stop_reason}); start a new run or resume it")
            pass_, expected_prompt = self.next_prompt(run_id)
            attempt = self._check(run, pass_, prompt or expected_prompt, reply, on_progress, cancel, round=run.attempts)
            return self._after_attempt(run, attempt)

    def _submit_round(
        self,
        run_id: str,
        pass_: str,
        prompt: str,
        replies: list[tuple[str, int | None]],
        on_progress: Progress,
        cancel: threading.Event | None,
    ) -> SubmitResult:
        """Check a round's replies (text, tokens) side by side, as many at once as the run's device
        lane has workers, each recorded as its own attempt; the result is about the round's best."""
        with self._lock(run_id):
            run = self.store.get_run(run_id)
            if run.status != "running":
                raise InputError(f"run '{run_id}' is {run.status} ({run.stop_reason}); start a new run or resume it")
            check = functools.partial(
                self._check, run, pass_, prompt, on_progress=on_progress, cancel=cancel, round=run.attempts
            )
            width = min(len(replies), self._check_width(run))
            if width <= 1:
                attempts = [
                    check(text, tokens=tokens, label=f"candidate {i}") for i, (text, tokens) in enumerate(replies)
                ]
            else:
                with ThreadPoolExecutor(width, thread_name_prefix=f"kforge-loop-{run_id}") as pool:
                    futures = [
                        pool.submit(check, text, tokens=tokens, label=f"candidate {i}")
                        for i, (text, tokens) in enumerate(replies)
                    ]
                    attempts = [f.result() for f in futures]  # the first error (e.g. JobCancelled) is raised
            return self._after_attempt(run, _round_best(attempts))

    def _check_width(self, run: Run) -> int:
        """How many checks of this run can run at once: the executor's slots for its device lane."""
        opts = self.options(run)
        try:
            return self.engine.parallelism(run.target, opts.device)
        except Exception:  # noqa: BLE001  (an engine without an executor: one at a time)
            return 1

    def _check(
        self,
        run: Run,
        pass_: str,
        prompt: str,
        reply: str,
        on_progress: Progress,
        cancel: threading.Event | None,
        tokens: int | None = None,
        round: int | None = None,
        label: str | None = None,
    ) -> Attempt:
        opts = self.options(run)
        say = on_progress or (lambda _m: None)
        n = label or f"attempt {run.attempts}"
        add = functools.partial(
            self.store.add_attempt, run.id, pass_, prompt=prompt, reply=reply, tokens=tokens, round=round
        )
        try:
            code = extract_candidate(reply).code
        except ExtractionError as e:
            return add(error=str(e))
        say(f"{n}: compiling")
        try:
            comp = self.engine.compile(run.target, code, problem=run.problem, timeout_s=opts.timeout_s, cancel=cancel)
        except InputError as e:  # e.g. no ModelNew: the agent's fault, so it is feedback, not a tool error
            return add(candidate=code, error=str(e))
        if not comp.ok:
            return add(candidate=code, compile_report=comp.model_dump(mode="json"))
        say(f"{n}: verifying")
        try:
            ver = self.engine.verify(
                run.problem,
                code,
                target=run.target,
                device=opts.device,
                trials=opts.trials,
                atol=opts.atol,
                rtol=opts.rtol,
                timeout_s=opts.timeout_s,
                baselines=opts.baselines,
                timing_budget_s=opts.timing_budget_s,
                on_progress=on_progress,
                cancel=cancel,
            )
        except InputError as e:
            return add(candidate=code, compile_report=comp.model_dump(mode="json"), error=str(e))
        correct = ver.verdict == "pass"
        recs = None
        if correct and opts.optimize and opts.profile:
            say(f"{n}: profiling")
            recs = self._advice(run, code, opts, cancel)
        return add(
            candidate=code,
            compile_report=comp.model_dump(mode="json"),
            verify_report=ver.model_dump(mode="json"),
            recommendations=recs,
            speedup=ver.speedup,
            correct=correct,
        )

    def _advice(self, run: Run, code: str, opts: LoopOptions, cancel) -> list[dict]:
        """The analysis agent's recommendations for a correct candidate, plus its summary line."""
        try:
            prof = self.engine.profile(
                run.problem,
                code,
                target=run.target,
                device=opts.device,
                depth=opts.profile_depth,
                iterations=3,
                timeout_s=opts.timeout_s,
                cancel=cancel,
            )
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
        return SubmitResult(
            run_id=run.id,
            attempt=attempt.index,
            verdict=summary.verdict,
            correct=attempt.correct,
            speedup=attempt.speedup,
            error=attempt.error,
            compile_report=attempt.compile_report,
            verify_report=attempt.verify_report,
            recommendations=attempt.recommendations,
            feedback=feedback,
            next_prompt=next_prompt,
            done=stop is not None,
            stop_reason=stop,
            best=self._best_model(best),
        )

    # kept as on main until the analysis rewrite there merges, then formatted
    # fmt: off
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
        if opts.max_tokens and sum(a.tokens or 0 for a in attempts) >= opts.max_tokens:
            return "max_tokens"
        return None
    # fmt: on

    @staticmethod
    def _best_model(best: Attempt | None) -> BestCandidate | None:
        if best is None:
            return None
        return BestCandidate(
            index=best.index, candidate=best.candidate, speedup=best.speedup, verify_report=best.verify_report
        )

    # ---- results ----

    def result(self, run_id: str) -> LoopResult:
        run = self.store.get_run(run_id)
        attempts = self.store.attempts(run_id)
        best = _best_of(attempts)
        return LoopResult(
            run_id=run.id,
            status=run.status,
            stop_reason=run.stop_reason,
            best=self._best_model(best),
            attempts=[summarize(a) for a in attempts],
            tokens=sum(a.tokens or 0 for a in attempts),
        )

    def finish(self, run_id: str) -> LoopResult:
        """The result, with the run's report written (a report that fails to draw does not fail the run)."""
        from ..run_report import write_report

        result = self.result(run_id)
        try:
            files = write_report(self.store, run_id)
            result.report, result.report_uri = files.html, files.uri
        except Exception as e:  # noqa: BLE001
            log.warning("could not write the report of run %s: %s: %s", run_id, type(e).__name__, e)
        return result

    def stop(self, run_id: str, status: str = "stopped", reason: str | None = None) -> None:
        self.store.update_run(run_id, status=status, stop_reason=reason)

    # ---- the headless driver ----

    def drive(
        self, run_id: str, generate: Generate, on_progress: Progress = None, cancel: threading.Event | None = None
    ) -> LoopResult:
        """Generate and check attempts until the run stops. Works for a new run and for one that
        was interrupted: it continues from the attempts already recorded, never redoing one."""
        with _driving_lock:
            if run_id in _driving:
                raise InputError(f"run '{run_id}' is already being driven in this process")
            self.store.claim(run_id)  # refused while another live process drives it
            _driving.add(run_id)
        beating = threading.Event()
        threading.Thread(
            target=self._heartbeat, args=(run_id, beating), daemon=True, name=f"kforge-heartbeat-{run_id}"
        ).start()
        try:
            self._drive(run_id, generate, on_progress, cancel)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM in the CLI: a stop the user asked for
            self.stop(run_id, "stopped", "interrupted by the user (Ctrl-C or SIGTERM)")
            raise
        except BaseException as e:
            self.stop(run_id, "failed", f"the loop failed: {type(e).__name__}: {str(e)[:300]}")
            raise
        finally:
            beating.set()
            with _driving_lock:
                _driving.discard(run_id)
        return self.finish(run_id)

    def _heartbeat(self, run_id: str, done: threading.Event) -> None:
        while not done.wait(HEARTBEAT_S):
            try:
                self.store.heartbeat(run_id)
            except Exception:  # noqa: BLE001  (a busy store now and then is harmless; the next beat retries)
                pass

    def _drive(self, run_id: str, generate: Generate, on_progress: Progress, cancel: threading.Event | None) -> None:
        say = on_progress or (lambda _m: None)
        cancelled = lambda: cancel is not None and cancel.is_set()  # noqa: E731
        while True:
            run = self.store.get_run(run_id)
            if run.status != "running":
                return
            if cancelled():
                return self.stop(run_id, "stopped", "cancelled")
            attempts = self.store.attempts(run_id)
            # a run killed after recording its last attempt but before being marked done stops here
            opts = self.options(run)
            stop = self._stop_reason(run, opts, attempts, _best_of(attempts))
            if stop:
                return self.store.update_run(run_id, status="done", stop_reason=stop)
            pass_, prompt = self.next_prompt(run_id)
            n = min(opts.candidates_per_round, opts.max_iterations - len(attempts))  # a round never overruns the budget
            say(
                f"attempt {run.attempts} ({pass_}): asking the generation agent"
                + (f" for {n} candidates" if n > 1 else "")
            )
            replies, errors = self._generate(generate, prompt, n)
            if cancelled():  # the replies came after a cancel: not checked, resume asks again
                return self.stop(run_id, "stopped", "cancelled")
            if not replies:  # a provider failure ends the run, recorded, not a crash
                e = errors[0]
                return self.stop(run_id, "failed", f"generation failed: {type(e).__name__}: {str(e)[:500]}")
            if errors:
                say(
                    f"{len(errors)} of {n} generations failed ({type(errors[0]).__name__}: {str(errors[0])[:200]}); "
                    f"checking the other {len(replies)}"
                )
            try:
                res = self._submit_round(run_id, pass_, prompt, replies, on_progress, cancel)
            except JobCancelled:
                return self.stop(run_id, "stopped", "cancelled")
            except KforgeError as e:
                return self.stop(run_id, "failed", f"checking the attempt failed: {e}")
            best = f", best speedup {_g(res.best.speedup)}x" if res.best else ""
            say(f"attempt {res.attempt}{' (best of the round)' if len(replies) > 1 else ''}: {res.verdict}{best}")
            if res.done:
                return

    @staticmethod
    def _generate(generate: Generate, prompt: str, n: int) -> tuple[list[tuple[str, int]], list[Exception]]:
        """Ask for n replies to one prompt, n requests at once: ([(text, tokens)], [errors])."""

        def one() -> tuple[str, int]:
            return reply_text_and_tokens(prompt, generate(prompt))

        if n == 1:
            try:
                return [one()], []
            except Exception as e:  # noqa: BLE001
                return [], [e]
        replies, errors = [], []
        with ThreadPoolExecutor(n, thread_name_prefix="kforge-generate") as pool:
            for f in [pool.submit(one) for _ in range(n)]:
                try:
                    replies.append(f.result())
                except Exception as e:  # noqa: BLE001
                    errors.append(e)
        return replies, errors

    def run(
        self,
        problem: str,
        target: str,
        generate: Generate,
        provider: str | None = None,
        options: LoopOptions | dict | None = None,
        on_progress: Progress = None,
        cancel: threading.Event | None = None,
    ) -> LoopResult:
        run = self.start(problem, target, provider=provider, options=options)
        return self.drive(run.id, generate, on_progress=on_progress, cancel=cancel)

    def resume(
        self,
        run_id: str,
        generate: Generate,
        on_progress: Progress = None,
        cancel: threading.Event | None = None,
        **more_options,
    ) -> LoopResult:
        """Continue a run from its last attempt (after a crash, a cancel, or with a larger budget):
        recorded attempts are kept; an attempt that was cut off is asked for again."""
        run = self.store.get_run(run_id)  # an unknown id fails here, naming the closest ones
        more = {k: v for k, v in more_options.items() if v is not None}
        opts = LoopOptions.parse({**run.options, **more})
        self.store.claim(run_id)  # before changing its options: refused while another process drives it
        self.store.update_run(run_id, options=opts.model_dump(mode="json"))
        return self.drive(run_id, generate, on_progress=on_progress, cancel=cancel)


def run_loop(
    problem: str,
    target: str = "triton",
    generate: Generate | None = None,
    *,
    engine=None,
    provider: str | None = None,
    max_iterations: int | None = None,
    on_progress: Progress = None,
    run_id: str | None = None,
    **options,
) -> LoopResult:
    """The whole loop headless: ``generate(prompt) -> reply`` plays the generation agent (or pass
    ``provider='anthropic'|'openai'`` to use one from ``kforge_mcp.agents.providers``). With
    ``run_id`` it resumes that run from its last attempt (options given override the run's)."""
    from ..api import default_engine

    if generate is None:
        if provider is None:
            raise InputError("run_loop needs generate=callable(prompt) -> reply, or provider='anthropic' or 'openai'")
        from .providers import make_provider

        generate = make_provider(provider)
    driver = LoopDriver(engine or default_engine())
    if run_id is not None:
        return driver.resume(run_id, generate, on_progress=on_progress, max_iterations=max_iterations, **options)
    opts = LoopOptions.parse({**options, **({"max_iterations": max_iterations} if max_iterations else {})})
    return driver.run(problem, target, generate, provider=provider or "callable", options=opts, on_progress=on_progress)


__all__ = ["LoopDriver", "LoopOptions", "LoopResult", "Reply", "SubmitResult", "estimate_tokens", "run_loop"]
