"""Where a job runs. The engine hands every worker job (probe, compile, verify, profile,
roofline) to an executor: ``LocalExecutor`` runs it on this machine's warm worker pool (one
worker per lane); other executors (Ray) send it to a node that has what the lane needs.

A lane names what a job needs, not a process: ``compile``, ``cpu``, ``cuda:N``, ``xpu:N``,
``mps``. An executor may run several jobs of one lane kind at once (``slots``) when it has
several workers for it; timing jobs on one device are never run side by side.
"""

from __future__ import annotations

import threading
from typing import Callable, Protocol

from .pool import WorkerPool

Progress = Callable[[str], None] | None


class Executor(Protocol):
    name: str

    def run(self, lane: str, kind: str, payload: dict, timeout_s: float, on_progress: Progress = None,
            cancel: threading.Event | None = None) -> dict:  # fmt: skip
        """Run one worker job; the worker's reply (``{"ok": ..., "value"/"kind"/"message"}``).
        Raises pool.WorkerFailure (or JobCancelled) when the job has no result."""
        ...

    def slots(self, lane: str) -> int:
        """How many jobs of this lane can run at once."""
        ...

    def prewarm(self, lane: str) -> None: ...

    def describe(self) -> dict:
        """What this executor is and what each of its nodes offers (for list_targets)."""
        ...

    def shutdown(self) -> None: ...


class LocalExecutor:
    """This machine: one warm worker per lane, jobs of a lane run one after another."""

    name = "local"

    def __init__(self, pool: WorkerPool):
        self.pool = pool

    def run(self, lane: str, kind: str, payload: dict, timeout_s: float, on_progress: Progress = None,
            cancel: threading.Event | None = None) -> dict:  # fmt: skip
        return self.pool.run(lane, kind, payload, timeout_s, on_progress, cancel)

    def slots(self, lane: str) -> int:
        return 1

    def prewarm(self, lane: str) -> None:
        self.pool.prewarm(lane)

    def describe(self) -> dict:
        return {"executor": self.name, "nodes": []}

    def shutdown(self) -> None:
        self.pool.shutdown()
