"""Where a job runs. The engine hands every worker job (probe, compile, verify, profile,
roofline) to an executor: ``LocalExecutor`` runs it on this machine's warm worker pool (one
worker per lane); other executors (Ray) send it to a node that has what the lane needs.

A lane names what a job needs, not a process: ``compile``, ``cpu``, ``cuda:N``, ``xpu:N``,
``mps``. An executor may run several jobs of one lane kind at once (``slots``) when it has
several workers for it; timing jobs on one device are never run side by side.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.requests import JobRequest, Reply, WarmUpRequest
from kforge_mcp.core.settings import Settings
from kforge_mcp.runtime.pool import JobCancelled, WorkerPool

Progress = Callable[[str], None] | None
CPU_LANES = ("compile", "cpu")  # lanes that need only CPUs: several workers may serve them at once
# the local default: a job waiting behind a busy (or hung) CPU worker starts on a second one, started then
LOCAL_CPU_WORKERS = 2


class Executor(Protocol):
    name: str

    def run(
        self,
        lane: str,
        request: JobRequest,
        timeout_s: float,
        on_progress: Progress = None,
        cancel: threading.Event | None = None,
    ) -> Reply:
        """Run one worker job; the worker's reply (its value, or why the job refused its input or failed).
        Raises pool.WorkerFailure (or JobCancelled) when the job has no result."""
        ...

    def slots(self, lane: str) -> int:
        """How many jobs of this lane can run at once."""
        ...

    def prewarm(self, lane: str) -> None: ...

    def warm_up(self, lane: str, request: WarmUpRequest, timeout_s: float, after_work: bool = False) -> Reply | None:
        """A ``warm_up`` job run only while the lane is idle (pool.run's ``warm_up`` and ``after_work``); None when
        not run."""
        ...

    def describe(self) -> dict:
        """What this executor is and what each of its nodes offers (for list_targets)."""
        ...

    def shutdown(self) -> None: ...


class LocalExecutor:
    """This machine: a warm worker per lane, jobs of a lane run one after another. The ``compile`` and
    ``cpu`` lanes have up to ``cpu_workers`` workers each (lanes ``cpu``, ``cpu.1``, ...; default
    LOCAL_CPU_WORKERS): a job that finds the warm one busy starts another, so a hung candidate holds
    one worker, not the lane, and a batch runs side by side there. A device lane keeps one worker,
    since timings on one device must not overlap."""

    name = "local"

    def __init__(self, pool: WorkerPool, cpu_workers: int | None = None):
        self.pool = pool
        self.cpu_workers = max(1, cpu_workers or pool.settings.cpu_workers or LOCAL_CPU_WORKERS)
        self._busy: dict[str, set[int]] = {}
        self._cond = threading.Condition()

    def run(
        self,
        lane: str,
        request: JobRequest,
        timeout_s: float,
        on_progress: Progress = None,
        cancel: threading.Event | None = None,
    ) -> Reply:
        if self.slots(lane) == 1:
            return self.pool.run(lane, request, timeout_s, on_progress, cancel)
        i = self._take(lane, cancel)
        try:
            return self.pool.run(lane if i == 0 else f"{lane}.{i}", request, timeout_s, on_progress, cancel)
        finally:
            with self._cond:
                self._busy[lane].discard(i)
                self._cond.notify_all()

    def _take(self, lane: str, cancel: threading.Event | None) -> int:
        """The lowest free worker of the lane (the lowest ones are the warm ones)."""
        with self._cond:
            busy = self._busy.setdefault(lane, set())
            while True:
                if cancel is not None and cancel.is_set():
                    raise JobCancelled()
                free = [i for i in range(self.cpu_workers) if i not in busy]
                if free:
                    busy.add(free[0])
                    return free[0]
                self._cond.wait(0.2)

    def slots(self, lane: str) -> int:
        return self.cpu_workers if lane in CPU_LANES else 1

    def prewarm(self, lane: str) -> None:
        self.pool.prewarm(lane)

    def warm_up(self, lane: str, request: WarmUpRequest, timeout_s: float, after_work: bool = False) -> Reply | None:
        return self.pool.run(lane, request, timeout_s, warm_up=True, after_work=after_work)

    def describe(self) -> dict:
        return {"executor": self.name, "cpu_workers": self.cpu_workers, "nodes": []}

    def shutdown(self) -> None:
        self.pool.shutdown()


def make_executor(
    settings: Settings,
    name: str | None = None,
    home: Path | str | None = None,
    memory_limit_mb: int | None = None,
    ray_address: str | None = None,
    cpu_workers: int | None = None,
    **ray_options,
) -> Executor:
    """``local`` (default) or ``ray``; the name and the Ray address fall back to ``settings`` ($KFORGE_EXECUTOR and
    $KFORGE_RAY_ADDRESS). A Ray executor with no address starts a local Ray."""
    name = (name or settings.executor or "local").lower()
    limit = memory_limit_mb or settings.worker_memory_mb
    if name == "local":
        home = Path(home).expanduser() if home else settings.home
        home.mkdir(parents=True, exist_ok=True)
        return LocalExecutor(WorkerPool(home, memory_limit_mb=limit, settings=settings), cpu_workers=cpu_workers)
    if name == "ray":
        from kforge_mcp.runtime.ray_executor import RayExecutor

        return RayExecutor(
            address=ray_address or settings.ray_address,
            home=str(home) if home else None,
            memory_limit_mb=limit,
            cpu_workers=cpu_workers,
            **ray_options,
        )
    raise InputError(f"unknown executor '{name}'; choose 'local' or 'ray'")
