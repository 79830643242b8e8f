"""nvcc's own front end over a source, as the stock build compiles it: the judge of a split host unit's failure.

The split build's host unit is compiled by the C++ compiler from a text the split wrote, so its error alone
does not prove that nvcc would fail. nvcc's first two steps (the host preprocessor and cudafe++, which parses
and checks the host code) take seconds where the stock build takes a minute, and nvcc stops where they fail:
their failure is the stock build's, in its words. Where they pass, the split may be at fault, and the stock
build decides.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from kforge_mcp.targets.cuda.build_cache import digest, write_whole
from kforge_mcp.targets.cuda.build_plan import Plan
from kforge_mcp.targets.cuda.nvcc_steps import front_end_steps

# the unit a failure of nvcc's front end names: the stock build's error, the candidate's
FRONT_END = "nvcc front end"


class FrontEnd:
    """The front end of one build's stock source. A failure is kept by what it depends on (the stock
    source, nvcc's flags, the toolchain and torch), so the GPU worker's build after a CPU worker's
    prebuild that failed says it at once."""

    def __init__(self, plan: Plan, cache_root: Path, versions: tuple):
        self.plan = plan
        self.proc: subprocess.Popen | None = None
        self.work: Path | None = None
        key = digest(FRONT_END, plan.cuda_cu, plan.nvcc, plan.cuda_cflags, plan.cuda_post_cflags, versions)
        self.kept = cache_root / "front-end-failures" / f"{key}.log"

    def known_failure(self) -> str | None:
        """nvcc's output where this source's front end failed before."""
        with contextlib.suppress(OSError):
            return self.kept.read_text(errors="replace")
        return None

    def start(self, work: Path) -> None:
        """Start it in ``work`` (a build's folder), in a process group of its own."""
        plan = self.plan
        (work / "cuda.cu").write_text(plan.cuda_cu)
        cmd = [*plan.nvcc, *plan.cuda_cflags, "-c", "cuda.cu", "-o", "cuda.o", *plan.cuda_post_cflags]
        script = front_end_steps(cmd, work / "cuda.cu")
        if script is None:
            return
        self.work = work
        with open(work / "front-end.log", "wb") as out:
            self.proc = subprocess.Popen(script, cwd=work, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def failed(self) -> bool:
        """Whether it has ended in failure (without waiting)."""
        return self.proc is not None and self.proc.poll() not in (None, 0)

    def failure_log(self) -> str | None:
        """nvcc's output where the front end failed (kept); None where it passed or could not run."""
        if self.proc is None or self.work is None:
            return None
        try:
            self.proc.wait(timeout=900)
        except subprocess.TimeoutExpired:
            self.stop()
            return None
        if self.proc.returncode == 0:
            return None
        log = (self.work / "front-end.log").read_text(errors="replace")
        self.kept.parent.mkdir(parents=True, exist_ok=True)
        write_whole(self.kept, log.encode())
        return log

    def stop(self) -> None:
        """End it with its children, where it still runs (the host unit compiled: it has nothing to say)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
