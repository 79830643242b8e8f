"""The sandbox a worker enters before any candidate code runs.

Protections, each on by default and each reported (``describe()`` / ``host["sandbox"]``):

* **limits** - RLIMIT_NOFILE, RLIMIT_CPU (a backstop, reset per job), RLIMIT_NPROC (not
  enforced by Linux for uid 0) and, where the pids cgroup is writable, a ``pids.max`` cap the
  pool sets on a cgroup of the worker's own, which also holds as root and lets the pool kill
  every process a candidate started (``setsid`` does not escape it).
* **network** - a fresh network namespace (``unshare(CLONE_NEWNET)``): only a down loopback
  device, so no connection can be made anywhere; Landlock's TCP rules back it up. The pipes
  to the server are inherited fds and keep working; GPUs are not affected.
* **filesystem** - Landlock: read and execute everywhere, write only to the worker's temp dir
  and the compile caches (triton, inductor, torch_extensions, ...) and the device files a
  GPU stack needs. The engine home itself (run store, compile-report cache) and ``~`` are
  read-only. Where the ABI allows, signals to processes outside the sandbox are blocked too.

Process cap, whichever is strongest here (reported as ``process cap``): the pids cgroup; else
a watchdog in the pool that counts the worker's tasks (the worker is a child subreaper, so
orphaned descendants stay in its tree) and stops and kills the whole tree above the cap, plus
RLIMIT_NPROC where it is enforced (not for root). The watchdog polls every 50 ms, so a fast fork
loop can overshoot the cap briefly before it is frozen and killed.

Configuration (environment of the server; the pool passes it to the worker):
``KFORGE_SANDBOX=off`` turns everything off; ``KFORGE_SANDBOX_DISABLE=landlock,network,limits,cgroup``
turns single protections off; ``KFORGE_SANDBOX_MAX_PROCS`` (default 1024, counts threads),
``KFORGE_SANDBOX_NOFILE`` (default 4096), ``KFORGE_SANDBOX_CPU_S`` (CPU seconds per job,
default 3600).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import signal
import time
from collections.abc import Mapping
from pathlib import Path

from kforge_mcp.core.process_env import variable
from kforge_mcp.core.settings import Settings
from kforge_mcp.runtime.landlock import _landlock, _libc, writable_dirs

PROTECTIONS = ("landlock", "network", "limits", "cgroup")

# The NVIDIA driver's cuInit fails under this Landlock ruleset (CUDA error 304, even with
# /dev/nvidia* writable), so on a machine with NVIDIA devices the filesystem rule is off and
# says why; the network namespace and the limits still apply there.
NVIDIA_CONTROL_DEVICE = "/dev/nvidiactl"
LANDLOCK_OFF_WITH_NVIDIA = "off (the NVIDIA driver fails under Landlock here: CUDA error 304)"

# what this process ended up with: filled by apply(), read by the probe
STATUS: dict[str, str] = {}


def enabled(name: str, env: Mapping[str, str]) -> bool:
    """Whether a protection is on in ``env`` (a worker's environment to be), by KFORGE_SANDBOX and
    KFORGE_SANDBOX_DISABLE; a process with its settings read asks ``Settings.sandbox_enabled``."""
    return Settings.read(env).sandbox_enabled(name)


# ---- pids cgroup (created and removed by the pool, joined by the worker) ----


def _pids_cgroup_root() -> Path | None:
    """The directory of this process's pids cgroup, where we may create children (v1 or v2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if "pids" in controllers.split(","):
            base = Path("/sys/fs/cgroup/pids")
            return base / rel.lstrip("/") if base.is_dir() else None
    for line in lines:  # cgroup v2: the unified hierarchy, if pids is delegated to our children
        if line.startswith("0::"):
            here = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
            try:
                if "pids" in (here / "cgroup.subtree_control").read_text().split():
                    return here
            except OSError:
                return None
    return None


class PidsCgroup:
    """A pids cgroup for one worker: the cap holds for root too, and kill() reaches every
    process in it, whatever session or process group it moved to."""

    _counter = 0

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, max_procs: int) -> PidsCgroup | None:
        root = _pids_cgroup_root()
        if root is None:
            return None
        cls._counter += 1
        path = root / f"kforge-{os.getpid()}-{cls._counter}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(max_procs))
        except OSError:
            try:
                path.rmdir()
            except OSError:
                pass
            return None
        return cls(path)

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def current(self) -> int | None:
        try:
            return int((self.path / "pids.current").read_text())
        except (OSError, ValueError):
            return None

    def kill_and_remove(self) -> None:
        for _ in range(50):  # a fork loop may add processes while we kill: repeat until empty
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)  # killed processes are still being reaped


# ---- process tree (the fallback cap where no pids cgroup can be had) ----

PR_SET_CHILD_SUBREAPER = 36


def tree_pids(pid: int) -> list[int]:
    """``pid`` and all its descendants, from /proc (children of every thread)."""
    out, todo, seen = [], [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return out


def tree_tasks(pid: int) -> int:
    """Threads and processes in ``pid``'s tree: what pids.max would count."""
    total = 0
    for p in tree_pids(pid):
        try:
            total += len(os.listdir(f"/proc/{p}/task"))
        except OSError:
            pass
    return total


def kill_tree(pid: int) -> None:
    """Kill ``pid`` and every descendant, also those in other sessions or process groups. A
    fork loop keeps adding processes while we walk: stop them first (a stopped process cannot
    fork), walk again until nothing new appears, then kill them all."""
    stopped: set[int] = set()
    quiet = 0
    for _ in range(400):
        new = [p for p in tree_pids(pid) if p not in stopped]
        if not new:
            # a fork that was under way when its parent got SIGSTOP still completes, and its child
            # shows up in the parent's list only then: wait for a few empty walks in a row
            quiet += 1
            if quiet >= 4:
                break
            time.sleep(0.02)
            continue
        quiet = 0
        for p in new:
            try:
                os.kill(p, signal.SIGSTOP)
            except OSError:
                pass
            stopped.add(p)
    for p in stopped:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def _become_subreaper() -> bool:
    try:
        return _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def exit_with_parent(poll_s: float = 0.5) -> None:
    """A worker whose server died (kill -9) must not run on with a candidate: when its parent
    changes, kill everything it started and exit. (PR_SET_PDEATHSIG would fire when the server
    *thread* that started the worker exits, so a thread polls the parent instead.)"""
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                me = os.getpid()
                for child in tree_pids(me)[1:]:
                    kill_tree(child)
                os._exit(70)

    threading.Thread(target=watch, daemon=True, name="kforge-parent-watch").start()


def watchdog_applies(has_cgroup: bool, settings: Settings) -> bool:
    """The pool counts a worker's tasks itself when the worker has no pids cgroup."""
    return not has_cgroup and settings.sandbox_enabled("limits")


def _join_cgroup(path: str) -> str:
    try:
        Path(path, "cgroup.procs").write_text(str(os.getpid()))
        return f"pids.max {Path(path, 'pids.max').read_text().strip()}"
    except OSError as e:
        return f"joining the pids cgroup failed: {e.strerror}"


# ---- rlimits ----


def _set_limit(which: int, soft: int) -> None:
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


def _apply_limits(settings: Settings) -> list[str]:
    done = []
    max_procs = settings.sandbox_max_procs
    try:
        _set_limit(resource.RLIMIT_NPROC, max_procs)
        done.append("nproc" if os.geteuid() != 0 else "nproc (rlimit not enforced for root)")
    except (ValueError, OSError):
        pass
    try:
        _set_limit(resource.RLIMIT_NOFILE, settings.sandbox_nofile)
        done.append("nofile")
    except (ValueError, OSError):
        pass
    if reset_cpu_limit(settings):
        done.append("cpu")
    return done


def reset_cpu_limit(settings: Settings) -> bool:
    """RLIMIT_CPU counts the process's whole life: before each job, allow sandbox_cpu_s more seconds."""
    if not settings.sandbox_enabled("limits"):
        return False
    cpu_s = settings.sandbox_cpu_s
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = int(usage.ru_utime + usage.ru_stime)
    try:
        _set_limit(resource.RLIMIT_CPU, used + cpu_s)
        return True
    except (ValueError, OSError):
        return False


def default_sigchld() -> None:
    """Give SIGCHLD its default action back. Ray's driver and workers ignore it (with
    kill_child_processes_on_worker_exit_with_raylet_subreaper), and an ignored SIGCHLD is
    inherited: children then reap themselves, so a worker killed by SIGABRT reads as "exit code 0"
    and a candidate's waitpid fails. Through libc, so it works from any thread."""
    try:
        _libc().signal(ctypes.c_int(signal.SIGCHLD), ctypes.c_void_p(0))  # SIG_DFL
    except (OSError, AttributeError):
        pass


# ---- network namespace ----

CLONE_NEWNET = 0x40000000


def _unshare_network() -> str:
    try:
        if hasattr(os, "unshare"):  # Python 3.12+
            os.unshare(CLONE_NEWNET)
        elif _libc().unshare(CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            return f"off (unshare failed: {os.strerror(err)})"
        return "on (network namespace)"
    except OSError as e:
        return f"off (unshare failed: {e.strerror})"


# ---- entry point ----


def apply(settings: Settings) -> dict[str, str]:
    """Enter the sandbox (the worker calls this before it reads its first job). Never raises:
    a protection that cannot be had is reported as off, with the reason."""
    STATUS.clear()
    exit_with_parent()  # not a protection one may turn off: an orphaned worker is never wanted
    on = settings.sandbox_enabled
    if not on("landlock") and not on("network") and not on("limits") and not on("cgroup"):
        STATUS.update({p: "off (disabled)" for p in PROTECTIONS})
        return STATUS
    cgroup = settings.sandbox_cgroup
    if not on("cgroup"):
        STATUS["cgroup"] = "off (disabled)"
    elif cgroup:
        STATUS["cgroup"] = _join_cgroup(cgroup)
        if "failed" not in STATUS["cgroup"]:
            STATUS["cgroup"] = "on (" + STATUS["cgroup"] + ")"
        else:
            STATUS["cgroup"] = "off (" + STATUS["cgroup"] + ")"
    else:
        STATUS["cgroup"] = "off (no writable pids cgroup)"
    if on("limits"):
        STATUS["limits"] = "on (" + ", ".join(_apply_limits(settings)) + ")"
    else:
        STATUS["limits"] = "off (disabled)"
    STATUS["process cap"] = _process_cap(STATUS["cgroup"], settings.sandbox_max_procs, on("limits"))
    STATUS["network"] = _unshare_network() if on("network") else "off (disabled)"
    if not on("landlock"):
        STATUS["landlock"] = "off (disabled)"
    elif os.path.exists(NVIDIA_CONTROL_DEVICE):
        STATUS["landlock"] = LANDLOCK_OFF_WITH_NVIDIA
    else:
        owned = {settings.worker_tmp, variable("TMPDIR")}
        STATUS["landlock"] = _landlock(writable_dirs(), owned)
    return STATUS


def _process_cap(cgroup_status: str, cap: int, limits: bool) -> str:
    """Which bound on processes holds for this worker, in words."""
    if cgroup_status.startswith("on"):
        return f"pids cgroup ({cap} tasks)"
    if not limits:
        return "none (limits disabled)"
    # keep orphaned grandchildren (double fork, setsid) in our tree, where the watchdog counts
    # and kills them; without this they would reparent to init and escape both
    reaper = _become_subreaper()
    parts = [] if os.geteuid() == 0 else [f"RLIMIT_NPROC {cap} (per user)"]
    parts.append(
        f"server watchdog (kills the worker's process tree above {cap} tasks, checked every 50 ms"
        + ("" if reaper else "; not a subreaper, so orphans escape it")
        + ")"
    )
    return " and ".join(parts)


def leftover_processes() -> int:
    """Child processes this worker still has after a job (a candidate that forked)."""
    count = 0
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                count += len(f.read().split())
    except OSError:
        pass
    return count


def describe(status: dict[str, str] | None = None) -> str:
    status = STATUS if status is None else status
    if not status:
        return "not applied"
    return "; ".join(f"{k}: {status[k]}" for k in (*PROTECTIONS, "process cap") if k in status)
