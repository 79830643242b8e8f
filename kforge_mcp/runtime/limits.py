"""What the pool's watchdog holds a worker to: its resident memory (from /proc), the time limit of the step
its job is in (Step), and how a worker that died is described (its signal, the end of its stderr)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable


def _rss_bytes(pid: int) -> int:
    """Resident memory of the worker and its direct children, from /proc."""
    total = 0
    pids = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    for p in pids:
        if p != pid and (pss := _pss_bytes(p)) is not None:
            total += pss  # a forked child shares the worker's pages: count its share, not them all
            continue
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            pass
    return total


def _pss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def summarize_stderr(lines: list[str], keep: int) -> str:
    """The end of a worker's stderr, with a faulthandler dump cut to the crashing thread's
    stack (other threads and the list of extension modules are noise to the reader)."""
    if any(line.startswith("Current thread") for line in lines):
        start = max(i for i, line in enumerate(lines) if line.startswith("Current thread"))
        fatal = [line for line in lines if line.startswith("Fatal Python error")]
        stack = []
        for line in lines[start:]:
            if not line.strip() or line.startswith("Extension modules"):
                break
            stack.append(line)
        lines = fatal[-1:] + stack
    return "\n".join(lines[-keep:])


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


class Step:
    """What a job is doing now, from its progress lines: each line starts a step, which may carry its own
    time limit (a correctness trial's, which follows from the reference's time) under the job's timeout.
    It forwards each line, then says every TICK_S how long the step has run and what its limit is."""

    TICK_S = 5.0

    def __init__(self, timeout_s: float, on_progress: Callable[[str], None] | None):
        self.job_started = time.monotonic()
        self.timeout_s, self.on_progress = timeout_s, on_progress
        self.message = ""
        self.limit_s: float | None = None
        self.why: str | None = None
        self.started, self.next_tick = self.job_started, self.job_started + self.TICK_S

    def begin(self, message: str, limit_s: float | None, why: str | None) -> None:
        self.message, self.why = message, why
        self.limit_s = float(limit_s) if isinstance(limit_s, (int, float)) and limit_s > 0 else None
        self.started = time.monotonic()
        self.next_tick = self.started + self.TICK_S
        self._say(message + (f" (limit {self.limit_s:g} s)" if self.limit_s else ""))

    def tick(self) -> None:
        now = time.monotonic()
        if now < self.next_tick or not self.message:
            return
        self.next_tick = now + self.TICK_S
        if self.limit_s:
            self._say(f"{self.message}: {now - self.started:.0f} s of its {self.limit_s:g} s limit")
        else:
            self._say(
                f"{self.message}: {now - self.started:.0f} s (job {now - self.job_started:.0f} s of {self.timeout_s:g} s)"
            )

    def overrun(self) -> bool:
        return self.limit_s is not None and time.monotonic() - self.started > self.limit_s

    def overrun_message(self) -> str:
        """Which limit was hit, why it was that long and how to raise it (the worker's ``why`` says)."""
        why = f" ({self.why})" if self.why else ""
        return f"{self.message} did not finish within {self.limit_s:g} s{why}; the worker was killed"

    def _say(self, text: str) -> None:
        if self.on_progress:
            self.on_progress(text)
