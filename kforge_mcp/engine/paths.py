"""Each problem's compute paths measured once per tolerance (judge/precision_paths.py): in a worker (the
reference is code too), on a thread of their own while a verify or profile runs, kept under the home (a failure
too)."""

from __future__ import annotations

import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from kforge_mcp.core.errors import KforgeError
from kforge_mcp.core.requests import InternalFailure, RooflineRequest
from kforge_mcp.core.source import Source
from kforge_mcp.engine.replies import failure_errors, report_of
from kforge_mcp.judge.precision_paths import MeasuredPaths, code_digest
from kforge_mcp.runtime.cache import CompileCache
from kforge_mcp.runtime.executor import Executor
from kforge_mcp.runtime.pool import WorkerFailure

PATHS_WAIT_S = 30.0  # a finished profile waits this long at most for the paths' measurement
# the verifies sharing one measurement wait this long at most in all: their verdicts do not depend on it, only
# the bound's path does, and a first verify should not wait on its own side work (the measurement goes on and
# serves the next call)
VERIFY_PATHS_WAIT_S = 2.0
Tolerance = tuple[str | None, float | None, float | None]  # (precision, atol, rtol) as the call gave them


class ComputePaths:
    def __init__(self, home: Path, executor: Executor):
        self.executor = executor
        self.cache = CompileCache(home / "cache" / "precision_paths", "the precision-paths cache")
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._running: dict[tuple, Future[MeasuredPaths]] = {}  # (problem, precision, atol, rtol) -> its measurement
        self._promised: weakref.WeakKeyDictionary[Future, float] = weakref.WeakKeyDictionary()  # waits given so far

    def measured(self, problem: Source, tolerance: Tolerance, timeout_s: float) -> MeasuredPaths:
        """Each compute path's max error on the problem's own inputs at the tolerance verify judges it at for
        these arguments: from the cache, else measured now."""
        precision, atol, rtol = tolerance
        key = self.cache.key(
            kind="precision_paths", problem=problem.text, precision=precision, atol=atol, rtol=rtol, code=code_digest()
        )
        hit = self.cache.get(key)
        if hit is not None and "failure" in hit:
            raise KforgeError(f"{hit['failure']} (kept from an earlier call under the home)")
        if hit is not None:
            return MeasuredPaths.model_validate({**hit, "cached": True})
        request = RooflineRequest(problem=problem, measure_paths=True, precision=precision, atol=atol, rtol=rtol)
        try:
            m = report_of(self.executor.run("compile", request, timeout_s), MeasuredPaths)
        except WorkerFailure as e:  # with the end of its stderr: a crash's message alone does not say why
            m = InternalFailure(message="the worker failed: " + "\n".join(failure_errors(e)))
        if isinstance(m, InternalFailure):  # kept too: a retry would pay for the same failure again
            failure = f"measuring the compute paths failed: {m.message}"
            self.cache.put(key, {"failure": failure})
            raise KforgeError(failure)
        self.cache.put(key, m.model_dump())
        return m

    def soon(self, problem: Source, tolerance: Tolerance, timeout_s: float) -> Future[MeasuredPaths]:
        """``measured`` on a thread of its own: a verify or profile runs meanwhile. Calls for the same problem and
        tolerance share one measurement (a batch of candidates measures its problem once)."""
        same = (problem.text, *tolerance)
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kforge-paths")
            self._running = {k: f for k, f in self._running.items() if not f.done()}  # done: cached
            if same not in self._running:
                self._running[same] = self._pool.submit(self.measured, problem, tolerance, timeout_s)
            return self._running[same]

    def verify_deadline(self, measurement: Future[MeasuredPaths], call_deadline: float) -> float:
        """How long a finished verify waits for ``measurement``: what is left of VERIFY_PATHS_WAIT_S over every
        verify that shares it. The first verify of a problem waits a little for a measured bound; the next ones,
        an agent's edit loop while a slow measurement runs, take it only once done instead of paying the wait
        again on every call."""
        now = time.perf_counter()
        with self._lock:
            given = self._promised.get(measurement, 0.0)
            left = max(0.0, min(VERIFY_PATHS_WAIT_S - given, call_deadline - now))
            self._promised[measurement] = given + left
        return now + left

    @staticmethod
    def deadline(call_deadline: float, wait_s: float = PATHS_WAIT_S) -> float:
        """How long a finished verify or profile waits for its measurement: a little, never past its own deadline
        (a slow one finishes in the background and serves the next call from the cache)."""
        return min(call_deadline, time.perf_counter() + wait_s)

    @staticmethod
    def result(future: Future[MeasuredPaths], deadline: float, notes: list[str]) -> MeasuredPaths | None:
        """The measurement, waited for until ``deadline``; a note in ``notes`` when there is none."""
        try:
            return future.result(timeout=max(0.0, deadline - time.perf_counter()))
        except FutureTimeout:
            notes.append(
                "the compute paths are still being measured on the problem's inputs: this bound judges them by "
                "their rounding; the next call uses the measurement"
            )
        except Exception as e:  # noqa: BLE001  (a reference the emulation cannot run keeps the rounding model)
            notes.append(f"compute paths not measured ({type(e).__name__}: {e}): the bound judges them by rounding")
        return None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
