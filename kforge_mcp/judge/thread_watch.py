"""Threads a candidate's forward leaves running (engine/guards.py's ``spawned_threads``)."""

from __future__ import annotations

import threading
from collections.abc import Collection

from kforge_mcp.core.schemas import Finding


class ThreadWatch:
    """Threads the candidate started in forward and left running: work that finishes after the
    clock stopped. Triton's autotuner, torch.compile, cuBLAS and CUDA start threads of their own
    during a forward (pools, compile workers, callbacks); those are not the candidate's. A thread
    is the candidate's when the code that started it, read outward from ``Thread.start`` past the
    standard library's threading machinery, is the candidate's own file (``owner_files``), or when
    the function it runs is. Threads that no start we saw created (C threads that touched Python)
    are not blamed."""

    def __init__(self, owner_files: Collection[str | None] = frozenset()):
        import sysconfig

        self.owner_files = {f for f in owner_files if f}
        self.stdlib = sysconfig.get_paths()["stdlib"]
        self.started: list[tuple[threading.Thread, bool]] = []

    def _machinery(self, filename: str) -> bool:
        """The standard library (threading, concurrent.futures, multiprocessing.pool, ...): it starts
        threads for whoever called it, so the caller decides."""
        return filename.startswith(self.stdlib) and "-packages" not in filename

    def _ours(self, frame) -> bool:
        while frame is not None and self._machinery(frame.f_code.co_filename):
            frame = frame.f_back
        return frame is not None and frame.f_code.co_filename in self.owner_files

    def __enter__(self):
        import sys

        self.before = set(threading.enumerate())
        self.real_start = real = threading.Thread.start
        watch = self

        def start(thread, *args, **kwargs):
            watch.started.append((thread, watch._ours(sys._getframe(1))))
            return real(thread, *args, **kwargs)

        threading.Thread.start = start
        return self

    def __exit__(self, *exc):
        threading.Thread.start = self.real_start
        alive = [t for t in threading.enumerate() if t not in self.before and t.is_alive()]
        recorded = {t: ours for t, ours in self.started}
        # a start we did not see (Thread.start bound before we patched it) is judged by what the thread runs
        self.left = [t.name for t in alive if recorded.get(t) or self._runs_ours(t)]
        self.excused = sorted({t.name for t in alive} - set(self.left))
        return False

    def _runs_ours(self, thread) -> bool:
        run = getattr(type(thread), "run", None)
        for fn in (getattr(thread, "_target", None), run):
            code = getattr(fn, "__code__", None)
            if code is not None and code.co_filename in self.owner_files:
                return True
        return False

    def finding(self) -> Finding | None:
        if not self.left and self.excused:
            return Finding(
                code="runtime_threads",
                severity="info",
                evidence={"threads": self.excused},
                message=f"threads the runtime started during forward, not the candidate: {', '.join(self.excused)}",
            )
        if not self.left:
            return None
        return Finding(
            code="spawned_threads",
            severity="suspicious",
            evidence={"threads": self.left, "runtime_threads": self.excused},
            message=f"ModelNew.forward left threads running: {', '.join(self.left)}",
        )
