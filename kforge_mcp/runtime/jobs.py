"""Jobs for calls that outlive their ``wait_s``: each runs on a thread, keeps its latest
progress line, and can be polled, fetched or cancelled by id."""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel

from kforge_mcp.core.errors import InputError, KforgeError
from kforge_mcp.core.schemas import JobInfo

MAX_KEPT_JOBS = 500


@dataclass
class Job:
    id: str
    tool: str
    status: str = "queued"
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    progress: str | None = None
    progress_log: list[str] = field(default_factory=list)  # every line, so a fast job loses none
    result: BaseModel | None = None
    error: BaseException | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    def info(self, with_result: bool = False) -> JobInfo:
        end = self.finished or time.monotonic()
        return JobInfo(
            job_id=self.id,
            tool=self.tool,
            status=self.status,
            seconds=round(end - self.started, 3),
            progress=self.progress,
            error=str(self.error) if self.error else None,
            result=self.result.model_dump(mode="json") if with_result and self.result is not None else None,
        )


class JobManager:
    def __init__(self):
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()

    def submit(self, tool: str, work: Callable[[Callable[[str], None], threading.Event], BaseModel]) -> Job:
        job = Job(id=uuid.uuid4().hex[:12], tool=tool)
        with self._lock:
            self._jobs[job.id] = job
            while len(self._jobs) > MAX_KEPT_JOBS:
                self._jobs.popitem(last=False)

        def progress(text: str) -> None:
            job.progress_log.append(text)
            job.progress = text

        def run() -> None:
            job.status = "running"
            try:
                job.result = work(progress, job.cancel)
                job.status = "cancelled" if job.cancel.is_set() else "done"
            except BaseException as e:  # noqa: BLE001  (kept and reported through job_result)
                job.error = e
                job.status = "cancelled" if job.cancel.is_set() else "failed"
            finally:
                job.finished = time.monotonic()
                job.done.set()

        threading.Thread(target=run, daemon=True, name=f"kforge-job-{job.id}").start()
        return job

    def get(self, job_id: str) -> Job:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise InputError(f"unknown job_id '{job_id}' (jobs are kept in memory for the server's lifetime)")
        return job

    def cancel(self, job_id: str) -> Job:
        job = self.get(job_id)
        if not job.done.is_set():
            job.cancel.set()
        return job


def raise_job_error(job: Job) -> None:
    """Re-raise a failed job's error for the caller: input errors stay input errors."""
    if job.error is None:
        return
    if isinstance(job.error, KforgeError):
        raise job.error
    raise KforgeError(f"{job.tool} failed: {type(job.error).__name__}: {job.error}")
