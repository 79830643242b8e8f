"""Warm worker processes, one per lane (a device, or 'compile'), each serving one job at a time.

A worker is a fresh ``python -m kforge_mcp.worker_jobs`` with a scrubbed environment, its
own session (so its whole process group can be killed), no core dumps, and a watchdog in
the server that enforces the wall-clock timeout and a resident-memory limit. A worker that
crashes, hangs or overruns is killed and replaced on the next job; the server never waits
on it longer than the job's timeout, nor on a step longer than the limit the worker gave it (Step).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Literal, overload

from kforge_mcp.core.errors import KforgeError
from kforge_mcp.core.requests import REPLY, Done, InternalFailure, JobRequest, Reply
from kforge_mcp.core.settings import Settings
from kforge_mcp.runtime import sandbox
from kforge_mcp.runtime.environment import worker_environment
from kforge_mcp.runtime.limits import Step, _rss_bytes, _signal_name, summarize_stderr

STARTUP_TIMEOUT_S = 180.0


MEMORY_SETTING = "KFORGE_WORKER_MEMORY_MB"  # the pool passes its limit on, so a job can tell what will not fit


POLL_S = 0.05


class WorkerFailure(KforgeError):
    """The worker died, hung or overran: the job has no result, and this says why."""

    actor_killed: bool  # set by the Ray executor when it killed the actor that ran the job

    def __init__(self, reason: str, message: str, stderr_tail: str = "", line: int | None = None):
        super().__init__(message)
        self.reason = reason  # crash | timeout | memory | processes | cancelled | internal
        self.stderr_tail = stderr_tail
        self.line = line


class JobCancelled(WorkerFailure):
    def __init__(self):
        super().__init__("cancelled", "the job was cancelled")


def _limit_child() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sandbox.default_sigchld()  # the worker and its candidates see their children's exits


class Worker:
    def __init__(
        self, lane: str, env: dict[str, str], cgroup: sandbox.PidsCgroup | None = None, max_tasks: int | None = None
    ):
        self.lane = lane
        self.cgroup = cgroup  # the worker joins it; kill() kills every process in it
        # without a cgroup: the process cap this server enforces by counting the worker's tree
        self.max_tasks = max_tasks
        self.jobs_served = 0
        self.stderr: collections.deque[str] = collections.deque(maxlen=300)
        self.lines_seen = self.job_started_at = 0  # stderr lines read in all, and when the current job began
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kforge_mcp.worker_jobs", str(to_child_r), str(from_child_w)],
            pass_fds=(to_child_r, from_child_w),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_limit_child,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self.to_worker = Connection(to_child_w, readable=False)
        self.from_worker = Connection(from_child_r, writable=False)
        threading.Thread(target=self._drain_stderr, daemon=True, name=f"kforge-stderr-{lane}").start()
        self.ready = False

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None  # started with stderr=PIPE
        for raw in iter(self.proc.stderr.readline, b""):
            self.stderr.append(raw.decode(errors="replace").rstrip("\n"))
            self.lines_seen += 1

    def stderr_tail(self, lines: int = 40) -> str:
        """The end of what the current job wrote to stderr (an earlier job's lines would blame it wrongly)."""
        fresh = min(len(self.stderr), self.lines_seen - self.job_started_at, 200)
        return summarize_stderr(list(self.stderr)[len(self.stderr) - fresh :], lines)

    def dump_stacks(self) -> None:
        """Have a hung worker write its Python stacks to stderr (faulthandler on SIGUSR1, worker.main) before
        it is killed: they hold the line the candidate was running."""
        with contextlib.suppress(OSError):
            os.kill(self.proc.pid, signal.SIGUSR1)
            time.sleep(0.5)  # faulthandler writes from the signal handler; the stderr reader takes it in

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.cgroup is None and self.proc.poll() is None:
            # not reaped yet, so the pid is still ours: stop and kill its whole tree, also the
            # children that left its process group (the worker is their subreaper)
            sandbox.kill_tree(self.proc.pid)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.cgroup is not None:
            self.cgroup.kill_and_remove()  # children that left the process group, too
        for conn in (self.to_worker, self.from_worker):
            try:
                conn.close()
            except OSError:
                pass

    def _failure(self, reason: str, message: str, hint: str = "") -> WorkerFailure:
        """``hint``: what to do about it, after where the candidate was."""
        time.sleep(0.1)  # let the stderr reader catch the last lines (faulthandler's stack)
        tail = self.stderr_tail()
        frames = re.findall(r'candidate_\d+\.py", line (\d+),? in (\S+)', tail)
        if frames and reason == "timeout":
            message += f" while it ran line {frames[-1][0]} of the candidate (in {frames[-1][1]})"
        return WorkerFailure(reason, message + hint, tail, int(frames[-1][0]) if frames else None)

    def _wait_message(
        self,
        deadline: float,
        memory_limit: int | None,
        cancel: threading.Event | None,
        what: str,
        timeout_s: float,
        step: Step | None = None,
    ) -> dict:
        while True:
            if cancel is not None and cancel.is_set():
                self.kill()
                raise JobCancelled()
            if step is not None:
                step.tick()
                if step.overrun():
                    self.dump_stacks()
                    self.kill()
                    raise self._failure("timeout", step.overrun_message())
            if self.from_worker.poll(POLL_S):
                try:
                    return json.loads(self.from_worker.recv_bytes())
                except (EOFError, OSError):
                    pass  # the worker died mid-message; reported below
                except ValueError as e:
                    self.kill()
                    raise self._failure("internal", f"worker sent a malformed reply: {e}") from None
            if self.proc.poll() is not None:
                raise self._failure("crash", f"the worker died during {what} ({_signal_name(self.proc.returncode)})")
            if time.monotonic() > deadline:
                self.dump_stacks()
                self.kill()
                during = f" during {step.message}" if step is not None and step.message else ""
                raise self._failure(
                    "timeout",
                    f"{what} did not finish within {timeout_s:g} s (its timeout){during}; the worker was killed",
                    ". Raise it with --timeout or timeout_s",
                )
            if self.max_tasks and sandbox.tree_tasks(self.proc.pid) > self.max_tasks:
                self.kill()
                raise self._failure(
                    "processes",
                    f"{what} started more than {self.max_tasks} processes and threads "
                    "(the sandbox's process cap); the worker and every process it started were killed",
                )
            if memory_limit and _rss_bytes(self.proc.pid) > memory_limit:
                self.kill()
                during = f" during {step.message}" if step is not None and step.message else ""
                raise self._failure(
                    "memory",
                    f"{what} used more than {memory_limit / 2**30:.1f} GiB of memory{during}; the worker was killed "
                    f"(the limit is {MEMORY_SETTING}={memory_limit // 2**20})",
                )

    def wait_ready(self, memory_limit: int | None) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.ready:
            msg = self._wait_message(deadline, memory_limit, None, "worker start-up", STARTUP_TIMEOUT_S)
            self.ready = msg.get("type") == "ready"

    def run(
        self,
        request: JobRequest,
        timeout_s: float,
        memory_limit: int | None,
        on_progress: Callable[[str], None] | None,
        cancel: threading.Event | None,
    ) -> Reply:
        kind = request.kind
        self.job_started_at = self.lines_seen
        self.to_worker.send_bytes(json.dumps({"kind": kind, "payload": request.model_dump(mode="json")}).encode())
        self.jobs_served += 1
        deadline = time.monotonic() + timeout_s
        step = Step(timeout_s, on_progress)
        while True:
            msg = self._wait_message(deadline, memory_limit, cancel, kind, timeout_s, step)
            if msg.get("type") == "progress":
                step.begin(str(msg.get("message", ""))[:500], msg.get("limit_s"), msg.get("limit_why"))
            elif msg.get("type") == "result":
                try:
                    return REPLY.validate_python(msg)
                except ValueError as e:
                    self.kill()
                    raise self._failure("internal", f"worker sent a malformed reply: {str(e)[:300]}") from None


@dataclass
class Lane:
    name: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    worker: Worker | None = None
    waiting: int = 0  # jobs blocked on ``lock`` (changed under the pool's lanes lock)
    worked: bool = False  # a job other than a warm-up has run here


class WorkerPool:
    def __init__(
        self,
        home: Path,
        memory_limit_mb: int | None = 8192,
        max_jobs_per_worker: int = 200,
        base_env: dict[str, str] | None = None,
        *,
        settings: Settings,
    ):
        self.home = home
        self.settings = settings  # read once by the entry point that made the pool
        self.memory_limit = memory_limit_mb * 2**20 if memory_limit_mb else None
        self.max_jobs_per_worker = max_jobs_per_worker
        self.base_env = base_env  # the environment workers are scrubbed from (default: this process's)
        self._tmp: Path | None = None  # made by the first worker start: a session without one leaves no folder
        self._lanes: dict[str, Lane] = {}
        self._lanes_lock = threading.Lock()
        self._workers: set[Worker] = set()  # every worker spawned and not yet reaped
        self._closed = False

    @property
    def tmp(self) -> Path:
        with self._lanes_lock:
            if self._closed:  # a background start (prewarm, probe) after shutdown makes no folder to leave behind
                raise WorkerFailure("cancelled", "the worker pool is shut down")
            if self._tmp is None:
                self._tmp = Path(tempfile.mkdtemp(prefix="kforge-workers-"))
            return self._tmp

    def _lane(self, name: str) -> Lane:
        with self._lanes_lock:
            return self._lanes.setdefault(name, Lane(name))

    def _start(self, lane: str) -> Worker:
        env = worker_environment(lane, self.home, self.tmp, self.base_env)
        cgroup = None
        if self.settings.sandbox_enabled("cgroup"):
            cgroup = sandbox.PidsCgroup.create(self.settings.sandbox_max_procs)
        if cgroup is not None:
            env["KFORGE_SANDBOX_CGROUP"] = str(cgroup.path)
        env[MEMORY_SETTING] = str(self.memory_limit // 2**20 if self.memory_limit else 0)
        max_tasks = None
        if sandbox.watchdog_applies(cgroup is not None, self.settings):  # no pids cgroup here: count the tree ourselves
            max_tasks = self.settings.sandbox_max_procs
        # spawned and registered under the lock: a shutdown comes either first (nothing is spawned) or after
        # (it kills this worker), never between, even when this is a background start the interpreter's exit freezes
        with self._lanes_lock:
            if self._closed:
                if cgroup is not None:
                    cgroup.kill_and_remove()
                raise WorkerFailure("cancelled", "the worker pool is shut down")
            worker = Worker(lane, env, cgroup, max_tasks)
            self._workers = {w for w in self._workers if w.proc.poll() is None} | {worker}
        try:
            worker.wait_ready(self.memory_limit)
        except WorkerFailure as e:
            worker.kill()
            raise WorkerFailure(e.reason, f"the {lane} worker failed to start: {e.message}\n{e.stderr_tail}") from None
        return worker

    def prewarm(self, lane: str) -> None:
        """Start a lane's worker in the background so the first call does not pay for it."""

        def start():
            state = self._lane(lane)
            with state.lock:
                if state.worker is None or not state.worker.alive():
                    try:
                        state.worker = self._start(lane)
                    except (WorkerFailure, OSError, EOFError):  # OSError: closed at shutdown mid-start
                        state.worker = None

        threading.Thread(target=start, daemon=True, name=f"kforge-prewarm-{lane}").start()

    # only a warm-up can come back without a reply (None)
    @overload
    def run(
        self,
        lane: str,
        request: JobRequest,
        timeout_s: float,
        on_progress: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
        warm_up: Literal[False] = False,
    ) -> Reply: ...
    @overload
    def run(
        self,
        lane: str,
        request: JobRequest,
        timeout_s: float,
        on_progress: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
        *,
        warm_up: bool,
        after_work: bool = False,
    ) -> Reply | None: ...
    def run(
        self,
        lane: str,
        request: JobRequest,
        timeout_s: float,
        on_progress: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
        warm_up: bool = False,
        after_work: bool = False,
    ) -> Reply | None:
        """The worker's reply. ``warm_up``: a job that only helps later ones, run only while the lane is idle
        (no job waiting for it, and none but warm-ups run on it yet unless ``after_work``); None when it was not
        run."""
        # we must see our workers' exit status: something in this process (ray.init) may have set
        # SIGCHLD to ignored since the last job, and then a crash would read as "exit code 0"
        sandbox.default_sigchld()
        state = self._lane(lane)
        with self._lanes_lock:
            state.waiting += 1
        with state.lock:
            with self._lanes_lock:
                state.waiting -= 1
                if warm_up and (state.waiting or (state.worked and not after_work)):
                    return None
                state.worked = state.worked or not warm_up
            if cancel is not None and cancel.is_set():
                raise JobCancelled()
            if state.worker is None or not state.worker.alive() or state.worker.jobs_served >= self.max_jobs_per_worker:
                if state.worker is not None:
                    state.worker.kill()
                if on_progress:
                    on_progress(f"starting a {lane} worker")
                state.worker = self._start(lane)
            try:
                reply = state.worker.run(request, timeout_s, self.memory_limit, on_progress, cancel)
            except WorkerFailure:
                state.worker.kill()
                state.worker = None
                raise
            if isinstance(reply, InternalFailure) or (isinstance(reply, Done) and reply.recycle):
                # a poisoned device context, or a failure we did not expect: do not reuse that process
                state.worker.kill()
                state.worker = None
            return reply

    def shutdown(self) -> None:
        with self._lanes_lock:
            self._closed = True
            lanes = list(self._lanes.values())
            workers = list(self._workers)
        for lane in lanes:
            lane.worker = None
        for worker in workers:
            if worker.proc.poll() is None:  # a reaped worker's pid may be someone else's by now
                worker.kill()
        self._remove_tmp()

    def _remove_tmp(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
