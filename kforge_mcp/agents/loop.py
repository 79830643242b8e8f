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
'stopped' with the reason; every drive ends by writing the run's report (report.py).

Here: the step API (start, next_prompt, submit, finish) and when to stop. Beside it: reply.py (what
a generation agent returns), results.py (options, results, ranking), feedback.py (failure text),
check.py (one attempt checked), driving.py (the headless rounds).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kforge_mcp.agents import prompts
from kforge_mcp.agents.check import check_reply
from kforge_mcp.agents.driving import Driving
from kforge_mcp.agents.feedback import _g, failure_feedback
from kforge_mcp.agents.reply import Generate, Progress, Reply, estimate_tokens
from kforge_mcp.agents.results import (
    BestCandidate,
    LoopOptions,
    LoopResult,
    SubmitResult,
    best_of,
    last_round,
    round_best,
    summarize,
)
from kforge_mcp.core.errors import InputError, KforgeError
from kforge_mcp.core.problem import resolve_source
from kforge_mcp.store import Attempt, Pass, Run, RunStore

log = logging.getLogger(__name__)


def optimize_feedback(best: Attempt, last: Attempt | None) -> str:
    """Measurements of the best candidate and the analysis agent's advice (and why the last try failed)."""
    v = best.verify_report or {}
    lines = []
    t = v.get("timing") or {}
    cand = (t.get("candidate") or {}).get("median_ms")
    base = v.get("speedup_over")
    base_ms = (t.get(base) or {}).get("median_ms") if base else None
    lines.append(
        f"Speedup {_g(v.get('speedup'))}x over {base or 'the baseline'} (candidate {_g(cand)} ms, "
        f"baseline {_g(base_ms)} ms)."
    )
    if v.get("fraction_of_sol") is not None:
        lines.append(
            f"It runs at {v['fraction_of_sol']:.0%} of the speed of light (T_SOL {_g(v.get('sol_ms'))} ms"
            + (f"; the bound assumes {v['sol_path']}" if v.get("sol_path") else "")
            + ")."
        )
    for f in v.get("findings", []):
        if f.get("code") == "interpreter_timing":
            lines.append(f"Note: {f['message']}")
    recs = best.recommendations or []
    summary = next((r.get("_summary") for r in recs if "_summary" in r), None)
    if summary:
        lines.append(f"Profile: {summary}")
    real = [r for r in recs if "_summary" not in r]
    if real:
        lines.append("Recommendations from the analysis agent, the biggest lever first:")
        for i, r in enumerate(real[:5], 1):
            gain = r.get("expected_gain")
            lines.append(
                f"{i}. {r.get('title')} ({r.get('priority', '?')} priority"
                + (f", ~{gain:.0%} of device time" if isinstance(gain, (int, float)) else "")
                + ")"
            )
            if r.get("evidence"):
                ev = r["evidence"]
                ev = (
                    "; ".join(f"{e.get('metric')}={_g(e.get('value'))}" if isinstance(e, dict) else str(e) for e in ev)
                    if isinstance(ev, list)
                    else str(ev)
                )
                lines.append(f"   evidence: {ev[:400]}")
            if r.get("action"):
                lines.append(f"   action: {r['action']}")
            if r.get("gain_basis"):
                lines.append(f"   expected gain estimated as: {r['gain_basis']}")
    else:
        lines.append("The analysis agent had no specific recommendation for this profile.")
    if last is not None and last.index != best.index:
        if last.correct:
            lines.append(
                f"Your last attempt ({last.index}) was correct but not faster (speedup {_g(last.speedup)}x); "
                "it was not kept."
            )
        else:
            lines.append(f"Your last attempt ({last.index}) was discarded:\n" + failure_feedback(last))
    return "\n".join(lines)


def resolve(engine, value: str, role: str):
    """Source text, or a .py path checked by the engine's path policy (allowed directories) when it has one."""
    fn = getattr(engine, "resolve_source", None)
    return fn(value, role) if fn is not None else resolve_source(value, role)


# how far a failed attempt got: the furthest one tells the agent the most


class LoopDriver(Driving):
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

    def next_prompt(self, run_id: str) -> tuple[Pass, str]:
        """(pass, prompt) for the run's next attempt, computed from the attempts so far."""
        run = self.store.get_run(run_id)
        opts = self.options(run)
        attempts = self.store.attempts(run_id)
        common: dict[str, Any] = dict(  # the render keywords every prompt of the run shares
            device=self._device_facts(run.target),
            reference_impl=opts.reference_impl,
            reference_target=opts.reference_target,
        )
        if not attempts:
            return "functional", prompts.render("first", run.target, run.problem, **common)
        # the latest round's best (with one candidate per round: the last attempt) is what the feedback is about
        last, best = round_best(last_round(attempts)), best_of(attempts)
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
        pass_: Pass,
        prompt: str,
        replies: Sequence[tuple[str, int | None]],
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
            return self._after_attempt(run, round_best(attempts))

    def _check_width(self, run: Run) -> int:
        """How many checks of this run can run at once: the executor's slots for its device lane."""
        opts = self.options(run)
        try:
            return self.engine.parallelism(run.target, opts.device)
        except Exception:  # noqa: BLE001  (an engine without an executor: one at a time)
            return 1

    def _check(self, run: Run, pass_: Pass, prompt: str, reply: str, on_progress: Progress, cancel, **kw) -> Attempt:
        return check_reply(
            self.engine, self.store, run, self.options(run), pass_, prompt, reply, on_progress, cancel, **kw
        )

    def _after_attempt(self, run: Run, attempt: Attempt) -> SubmitResult:
        opts = self.options(run)
        attempts = self.store.attempts(run.id)
        best = best_of(attempts)
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

    def _stop_reason(self, run: Run, opts: LoopOptions, attempts: list[Attempt], best: Attempt | None) -> str | None:
        if best is not None:
            if not opts.optimize:
                return "correct"
            frac = (best.verify_report or {}).get("fraction_of_sol")
            if opts.stop_at_sol and frac is not None and frac >= opts.stop_at_sol:
                return f"reached {frac:.0%} of speed of light"
            at_limit = next((r for r in best.recommendations or [] if r.get("stop")), None)
            if opts.stop_at_limit and at_limit is not None:
                return f"at the limit (analysis agent): {at_limit.get('title')}"
        if len(attempts) >= opts.max_iterations:
            return "max_iterations"
        if opts.max_seconds and time.time() - run.created >= opts.max_seconds:
            return "max_seconds"
        if opts.max_tokens and sum(a.tokens or 0 for a in attempts) >= opts.max_tokens:
            return "max_tokens"
        return None

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
        best = best_of(attempts)
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
        from kforge_mcp.agents.report import write_report

        result = self.result(run_id)
        try:
            files = write_report(self.store, run_id)
            result.report, result.report_uri = files.html, files.uri
        except Exception as e:  # noqa: BLE001
            log.warning("could not write the report of run %s: %s: %s", run_id, type(e).__name__, e)
        return result

    def stop(self, run_id: str, status: str = "stopped", reason: str | None = None) -> None:
        self.store.update_run(run_id, status=status, stop_reason=reason)


def run_loop(
    problem: str,
    target: str = "triton",
    generate: Generate | None = None,
    *,
    engine,
    provider: str | None = None,
    max_iterations: int | None = None,
    on_progress: Progress = None,
    run_id: str | None = None,
    **options,
) -> LoopResult:
    """The whole loop headless: ``generate(prompt) -> reply`` plays the generation agent (or pass
    ``provider='anthropic'|'openai'`` to use one from ``kforge_mcp.agents.providers``). With
    ``run_id`` it resumes that run from its last attempt (options given override the run's).
    ``engine``: the one to run on (kforge_mcp.run_loop passes the default engine)."""
    if generate is None:
        if provider is None:
            raise InputError("run_loop needs generate=callable(prompt) -> reply, or provider='anthropic' or 'openai'")
        from kforge_mcp.agents.providers import make_provider

        generate = make_provider(provider, settings=engine.settings)
    driver = LoopDriver(engine)
    if run_id is not None:
        return driver.resume(run_id, generate, on_progress=on_progress, max_iterations=max_iterations, **options)
    opts = LoopOptions.parse({**options, **({"max_iterations": max_iterations} if max_iterations else {})})
    return driver.run(problem, target, generate, provider=provider or "callable", options=opts, on_progress=on_progress)


# re-exported: the loop's public names, wherever they live
__all__ = [
    "LoopDriver",
    "LoopOptions",
    "LoopResult",
    "Reply",
    "SubmitResult",
    "estimate_tokens",
    "run_loop",
    "summarize",
]
