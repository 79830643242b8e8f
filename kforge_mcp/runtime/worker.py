"""The worker process: the only place candidate code runs (started as ``python -m kforge_mcp.worker_jobs``,
which hands this loop the jobs it can do).

Started by the pool with a scrubbed environment and two pipe fds. Requests and replies are
JSON frames (never pickle: a hostile worker must not be able to run code in the server).
Anything the candidate prints goes to stderr, which the pool keeps for crash reports.
"""

from __future__ import annotations

import faulthandler
import json
import os
import shutil
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from kforge_mcp import platforms, targets
from kforge_mcp.core.process_env import set_variable
from kforge_mcp.core.settings import Settings


def device_healthy() -> bool:
    """A CUDA fault (illegal address, ...) poisons the context for the life of the process:
    report it, so the pool replaces this worker instead of failing every later job."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():  # (not imported: a probe that asked the driver)
        return True
    try:
        torch.cuda.synchronize()
        return True
    except Exception:  # noqa: BLE001
        return False


CANDIDATE_JOBS = ("verify", "profile")  # the jobs that run candidate code on a device


def device_snapshot(device: str) -> dict:
    """The device-wide state of ``device`` a candidate could leave changed (empty where none, or unreadable)."""
    from kforge_mcp.devices.device import get_device

    try:
        return get_device(device).snapshot()
    except Exception:  # noqa: BLE001  (a device this worker cannot read: nothing to compare)
        return {}


def device_state_left(device: str, clean: dict) -> bool:
    """Put back what a job left changed on ``device`` (verify does so itself, and reports it; this is for
    every job); True when something stays changed and the worker must not be reused."""
    from kforge_mcp.devices.device import get_device

    try:
        return bool(get_device(device).restore(clean))
    except Exception:  # noqa: BLE001
        return True


def release_memory() -> None:
    """Give a job's freed host memory back to the OS, so a warm worker's footprint does not
    creep up across GPU-sized jobs until the memory limit kills it."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


MAX_LEFTOVER_CHILDREN = 16  # more than a compile pool leaves: the worker is replaced (with them)

Handler = Callable[[Any, Callable[..., None], Path, dict], dict]  # (its JobRequest, progress, workdir, state)


def serve(
    conn_in: Connection,
    conn_out: Connection,
    handlers: dict[str, Handler],
    timer_snapshot: Callable,
    settings: Settings,
) -> None:
    """Answer requests until the pipe closes. ``handlers`` do the jobs by kind; ``timer_snapshot`` reads
    the clocks a candidate could patch (taken clean once torch is in, compared after every job)."""
    from kforge_mcp.core.errors import InputError

    state: dict = {"settings": settings}  # what the jobs of this worker keep; its settings, read at its entry

    def send(message: dict) -> None:
        conn_out.send_bytes(json.dumps(message, default=str).encode())

    def progress(text: str, limit_s: float | None = None, why: str | None = None) -> None:
        """A step of the job; ``limit_s``: the server kills this worker if the step outlives it (``why``: whence)."""
        send({"type": "progress", "message": text} | ({"limit_s": limit_s, "limit_why": why} if limit_s else {}))

    from kforge_mcp.core.requests import Done, InputFailure, InternalFailure, Reply, parse_request
    from kforge_mcp.runtime import refusals, sandbox

    clean_timers = None  # taken once torch is in: a job that patches these leaves a worker we do not reuse
    clean_devices: dict[str, dict] = {}  # device -> its state before any candidate ran on it in this worker

    def warm() -> None:
        nonlocal clean_timers
        if clean_timers is None:
            import torch  # noqa: F401  (warm: a verify must not pay for this)

            clean_timers = timer_snapshot()

    def answer(kind: str, payload: dict, workdir: Path, device: str | None) -> Reply:
        try:
            value = handlers[kind](parse_request(kind, payload), progress, workdir, state)
            # a poisoned device, patched clocks, threads the candidate left running (they would run on into
            # the next job), or device state that could not be put back: this process is not reused
            left_threads = any(f.get("code") == "spawned_threads" for f in value.get("findings", []))
            patched = clean_timers is not None and timer_snapshot() != clean_timers  # (None: our probe ran)
            recycle = not device_healthy() or patched or left_threads
            recycle = recycle or bool(device and device_state_left(device, clean_devices[device]))
            recycle = recycle or sandbox.leftover_processes() > MAX_LEFTOVER_CHILDREN  # a candidate forked
            return Done(value=value, recycle=recycle)
        except InputError as e:  # the problem's own code among them: say so when the sandbox refused it something
            return InputFailure(message=refusals.explained(e.message, e, e.diagnostics), diagnostics=e.diagnostics)
        except BaseException as e:  # noqa: BLE001  (a candidate may raise SystemExit; report it, keep serving)
            return InternalFailure(message=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-4000:])

    # The compile lane's first job is the probe, which asks the driver rather than torch where it can
    # (driver_probe.py): it answers before torch's import (seconds on a cold machine), then imports it.
    if settings.worker_lane != "compile":
        warm()
    send({"type": "ready", "pid": os.getpid()})
    while True:
        try:
            request = json.loads(conn_in.recv_bytes())
        except EOFError:
            return
        if request["kind"] != "probe":
            warm()  # before any code of a candidate's runs, so the timers are taken clean
        device = request["payload"].get("device") if request["kind"] in CANDIDATE_JOBS else None
        if device and device not in clean_devices:
            clean_devices[device] = device_snapshot(device)
        sandbox.reset_cpu_limit(settings)  # a CPU-time backstop per job, not per worker life
        refusals.forget_socket_calls()
        workdir = Path(tempfile.mkdtemp(prefix="job-", dir=settings.worker_tmp))
        os.chdir(workdir)  # relative writes by the candidate land in its own job folder
        try:
            reply = answer(request["kind"], request["payload"], workdir, device)
            send({"type": "result", **reply.model_dump()})
        finally:
            os.chdir(workdir.parent)
            shutil.rmtree(workdir, ignore_errors=True)
            release_memory()
        warm()  # after a probe answered without torch: import it now, while the lane is idle


def main(handlers: dict[str, Handler], timer_snapshot: Callable) -> None:
    read_fd, write_fd = int(sys.argv[1]), int(sys.argv[2])
    conn_in, conn_out = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    os.dup2(2, 1)  # candidate prints must never land in the protocol
    sys.stdout = sys.stderr
    faulthandler.enable()  # a segfault prints the Python stack, with the candidate's line
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # so does a hang: the pool signals before it kills
    set_variable("KINETO_LOG_LEVEL", "6")  # torch.profiler's stage lines (USDT: ... profiler_start) are noise here
    from kforge_mcp.runtime import refusals
    from kforge_mcp.runtime.sandbox import apply

    settings = Settings.read()  # this process's entry: read once, from the environment the pool gave it
    platforms.use(settings)
    targets.use(settings)
    apply(settings)  # limits, no network, writes only to its temp dir and caches: before any candidate code
    sys.addaudithook(refusals.audit)  # names the address of a connection the sandbox refuses
    serve(conn_in, conn_out, handlers, timer_snapshot, settings)
