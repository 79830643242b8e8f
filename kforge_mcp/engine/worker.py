"""The worker process: the only place candidate code runs.

Started by the pool with a scrubbed environment and two pipe fds. Requests and replies are
JSON frames (never pickle: a hostile worker must not be able to run code in the server).
Anything the candidate prints goes to stderr, which the pool keeps for crash reports.
"""

from __future__ import annotations

import faulthandler
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path


def handle_probe(req, progress, workdir, state) -> dict:
    from ..driver_probe import discover_without_torch, sm_arch
    from ..schemas import TargetsReport
    from ..targets import TARGETS
    from . import sandbox

    found = discover_without_torch()  # torch's answer without its import, where that is exact
    if found is None:
        import torch

        from ..device import discover

        devices, names = discover()
        facts = {"torch": torch.__version__}
        if torch.cuda.is_available():
            facts["arch"] = sm_arch(*torch.cuda.get_device_capability(0))
    else:
        devices, names, facts = found
    host = {"python": platform.python_version(), "torch": facts["torch"], "platform": platform.platform()}
    host.update({f"device {d}": n for d, n in names.items()})
    host["sandbox"] = sandbox.describe()
    host.update({k: v for k, v in facts.items() if k == "arch"})
    host["probe"] = "torch" if found is None else "driver"
    return TargetsReport(targets=[t.probe(devices) for t in TARGETS.values()], host=host).model_dump()


def handle_compile(req, progress, workdir, state) -> dict:
    from ..problem import Source
    from ..targets import get_target

    target = get_target(req["target"])
    problem = Source.from_wire(req["problem"]) if req.get("problem") else None
    progress(f"compiling for {req.get('arch') or 'the default arch'}")
    report = target.compile(Source.from_wire(req["source"]), req.get("arch"), problem, workdir)
    if not req.get("emit_ptx"):
        report.ptx = None
        report.sass = None
    return report.model_dump()


def handle_prebuild(req, progress, workdir, state) -> dict:
    """Build a candidate's kernels for a device without running them (ahead of its GPU verify)."""
    from ..problem import Source
    from ..targets import get_target

    started = time.perf_counter()
    builds = get_target(req["target"]).prebuild(Source.from_wire(req["candidate"]), req["device"], workdir)
    return {"builds": [vars(b) for b in builds], "seconds": round(time.perf_counter() - started, 2)}


def handle_verify(req, progress, workdir, state) -> dict:
    from .verify import BaselineCache, run_verify

    cache = state.setdefault("baselines", BaselineCache())
    return run_verify(req, progress, workdir, cache).model_dump()


def handle_baselines(req, progress, workdir, state) -> dict:
    from .verify import BaselineCache, run_baselines

    return run_baselines(req, progress, workdir, state.setdefault("baselines", BaselineCache()))


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


def handle_profile(req, progress, workdir, state) -> dict:
    from .profile import run_profile

    report = run_profile(req, progress, workdir)
    return {**report.model_dump(), "raw": report.raw}  # raw is excluded from dumps: send it anyway


def handle_roofline(req, progress, workdir, state) -> dict:
    from ..analysis.roofline import reference_roofline
    from ..problem import Source, load_problem

    problem = load_problem(Source.from_wire(req["problem"]), workdir)
    return reference_roofline(
        problem,
        "cpu",
        req.get("device_name"),
        req.get("measured_ms"),
        req.get("peaks"),
        req.get("atol"),
        req.get("rtol"),
    ).model_dump()


def handle_warm_up(req, progress, workdir, state) -> dict:
    """Before any problem is known: torch.compile's fixed cost paid on this device (baselines.warm_inductor)."""
    from .baselines import warm_inductor

    started = time.perf_counter()
    warm_inductor(req["device"], req.get("stage", "all"))
    return {"seconds": round(time.perf_counter() - started, 2)}


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

HANDLERS = {
    "probe": handle_probe,
    "compile": handle_compile,
    "verify": handle_verify,
    "prebuild": handle_prebuild,
    "baselines": handle_baselines,
    "profile": handle_profile,
    "roofline": handle_roofline,
    "warm_up": handle_warm_up,
}


def serve(conn_in: Connection, conn_out: Connection) -> None:
    from ..errors import InputError

    state: dict = {}

    def send(message: dict) -> None:
        conn_out.send_bytes(json.dumps(message, default=str).encode())

    def progress(text: str) -> None:
        send({"type": "progress", "message": text})

    from ..settings import Settings
    from . import guards, sandbox

    clean_timers = None  # taken once torch is in: a job that patches these leaves a worker we do not reuse

    def warm() -> None:
        nonlocal clean_timers
        if clean_timers is None:
            import torch  # noqa: F401  (warm: a verify must not pay for this)

            clean_timers = guards.timer_snapshot()

    # The compile lane's first job is the probe, which asks the driver rather than torch where it can
    # (driver_probe.py): it answers before torch's import (3.5-4.4 s on the H100 machines), then imports it.
    if Settings.read().worker_lane != "compile":
        warm()
    send({"type": "ready", "pid": os.getpid()})
    while True:
        try:
            request = json.loads(conn_in.recv_bytes())
        except EOFError:
            return
        if request["kind"] != "probe":
            warm()  # before any code of a candidate's runs, so the timers are taken clean
        sandbox.reset_cpu_limit()  # a CPU-time backstop per job, not per worker life
        workdir = Path(tempfile.mkdtemp(prefix="job-", dir=Settings.read().worker_tmp))
        os.chdir(workdir)  # relative writes by the candidate land in its own job folder
        try:
            value = HANDLERS[request["kind"]](request["payload"], progress, workdir, state)
            # a poisoned device, patched clocks, or threads the candidate left running (they
            # would run on into the next job): this process is not reused
            left_threads = any(f.get("code") == "spawned_threads" for f in (value or {}).get("findings", []))
            patched = clean_timers is not None and guards.timer_snapshot() != clean_timers  # (None: our probe ran)
            recycle = not device_healthy() or patched or left_threads
            recycle = recycle or sandbox.leftover_processes() > MAX_LEFTOVER_CHILDREN  # a candidate forked
            send({"type": "result", "ok": True, "value": value, "recycle": recycle})
        except InputError as e:
            send(
                {
                    "type": "result",
                    "ok": False,
                    "kind": "input",
                    "message": e.message,
                    "diagnostics": [d.model_dump() for d in e.diagnostics],
                }
            )
        except BaseException as e:  # noqa: BLE001  (a candidate may raise SystemExit; report it, keep serving)
            send(
                {
                    "type": "result",
                    "ok": False,
                    "kind": "internal",
                    "message": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc()[-4000:],
                }
            )
        finally:
            os.chdir(workdir.parent)
            shutil.rmtree(workdir, ignore_errors=True)
            release_memory()
        warm()  # after a probe answered without torch: import it now, while the lane is idle


def main() -> None:
    read_fd, write_fd = int(sys.argv[1]), int(sys.argv[2])
    conn_in, conn_out = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    os.dup2(2, 1)  # candidate prints must never land in the protocol
    sys.stdout = sys.stderr
    faulthandler.enable()  # a segfault prints the Python stack, with the candidate's line
    from .sandbox import apply

    apply()  # limits, no network, writes only to its temp dir and caches: before any candidate code
    serve(conn_in, conn_out)


if __name__ == "__main__":
    main()
