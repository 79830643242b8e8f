"""The headless half of the loop: generate and check rounds until the run stops, with a provider
(or any ``generate(prompt) -> reply`` callable) as the generation agent.

A driven run is owned by the driving process (pid, host, heartbeat in the store), so a run whose
process died reads as 'interrupted'. ``Driving`` is mixed into LoopDriver (loop.py): it uses the
driver's store, options, next_prompt, _submit_round, _stop_reason, start, finish and stop.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from kforge_mcp.agents.feedback import _g
from kforge_mcp.agents.reply import Generate, Progress, reply_text_and_tokens
from kforge_mcp.agents.results import LoopOptions, LoopResult, SubmitResult, best_of
from kforge_mcp.core.errors import InputError, KforgeError
from kforge_mcp.runtime.pool import JobCancelled
from kforge_mcp.store import HEARTBEAT_S, Attempt, Pass, Run, RunStore

_driving: set[str] = set()  # runs a driver in this process is driving now (the store's owner is the process)
_driving_lock = threading.Lock()


class Driving:
    if TYPE_CHECKING:  # what LoopDriver (loop.py) gives the mixin
        store: RunStore

        def start(
            self, problem: str, target: str, provider: str | None = None, options: LoopOptions | dict | None = None
        ) -> Run: ...
        def options(self, run: Run) -> LoopOptions: ...
        def next_prompt(self, run_id: str) -> tuple[Pass, str]: ...
        def _submit_round(
            self,
            run_id: str,
            pass_: Pass,
            prompt: str,
            replies: Sequence[tuple[str, int | None]],
            on_progress: Progress,
            cancel: threading.Event | None,
        ) -> SubmitResult: ...
        def _stop_reason(
            self, run: Run, opts: LoopOptions, attempts: list[Attempt], best: Attempt | None
        ) -> str | None: ...
        def finish(self, run_id: str) -> LoopResult: ...
        def stop(self, run_id: str, status: str = "stopped", reason: str | None = None) -> None: ...

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
            stop = self._stop_reason(run, opts, attempts, best_of(attempts))
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
        run_id = run.id  # the full id, when given a unique prefix
        more = {k: v for k, v in more_options.items() if v is not None}
        opts = LoopOptions.parse({**run.options, **more})
        self.store.claim(run_id)  # before changing its options: refused while another process drives it
        self.store.update_run(run_id, options=opts.model_dump(mode="json"))
        return self.drive(run_id, generate, on_progress=on_progress, cancel=cancel)
