"""The metrics profiler's program launched ahead (profiling/spare.py): the runner waits in --spare mode, the next
capture with the same command hands it its spec and reads its output, and a spare nobody takes goes away. A GPU
verify launches the first profile's in its idle worker (profiling/ahead.py). Run here
without a profiler around the runner (ncu needs a GPU): a spec in the unitrace profiler's mode runs the forwards plainly
on the CPU, as the program does under any profiler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kforge_mcp.core.problem import Source
from kforge_mcp.core.process_env import child_environment
from kforge_mcp.core.profile import ProfileReport
from kforge_mcp.core.requests import ProfileRequest
from kforge_mcp.core.settings import Settings
from kforge_mcp.platforms.base import Profiler
from kforge_mcp.profiling import capture, spare
from kforge_mcp.profiling.spare import Spares

PROBLEM = Path(__file__).resolve().parents[1] / "examples" / "problems" / "fused_bias_gelu.py"


def _command(workdir: Path, device: str = "cpu") -> list[str]:
    """The runner's command for one capture's spec in its own folder, as the metrics capture makes it."""
    workdir.mkdir(parents=True)
    req = ProfileRequest(problem=Source(PROBLEM.read_text(), PROBLEM.name), target="triton", device=device)
    extra = {"times_file": str(workdir / capture.TIMES_FILE)}
    return capture._runner(req, workdir, "unitrace", extra, Settings.read())


def test_the_next_capture_takes_the_spare_the_last_one_left(tmp_path):
    spares = Spares()
    try:
        first = capture._run(_command(tmp_path / "a"), tmp_path / "a", 120, spares)
        assert first.returncode == 0, first.stderr[-2000:]
        waiting = spares.spare
        assert waiting is not None and waiting.proc.poll() is None  # launched for the next capture, waiting
        time.sleep(3)  # its imports done meanwhile
        handed = time.time()
        second = capture._run(_command(tmp_path / "b"), tmp_path / "b", 120, spares)
        assert second.returncode == 0, second.stderr[-2000:]
        assert waiting.proc.returncode == 0 and spares.spare is not waiting  # the spare ran it; a new one waits
        assert not waiting.folder.exists()  # its folder went with it
        moments = json.loads((tmp_path / "b" / capture.TIMES_FILE).read_text())
        assert set(moments) >= {"ready", "done"} and moments["ready"] >= handed
    finally:
        spares.close()


def test_a_spare_for_another_command_is_not_taken(tmp_path):
    spares = Spares()
    try:
        capture._run(_command(tmp_path / "a"), tmp_path / "a", 120, spares)
        waiting = spares.spare
        assert waiting.stands_for(_command(tmp_path / "c"))
        assert not waiting.stands_for(_command(tmp_path / "d", device="cuda:1"))  # its context is on another device
        other = _command(tmp_path / "b")
        other.insert(1, "-X")  # another interpreter option: not the command the spare was launched for
        other.insert(2, "utf8")
        assert capture._run(other, tmp_path / "b", 120, spares).returncode == 0
        assert waiting.proc.returncode is not None and waiting.proc.returncode != 0  # closed, not handed the spec
    finally:
        spares.close()


def test_a_spare_exits_when_its_worker_goes_or_nobody_takes_it(tmp_path, monkeypatch):
    env = child_environment()
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    monkeypatch.setattr(spare.os, "getpid", lambda: worker.pid)  # the spare watches this process as its worker
    gone = spare.SpareProgram(_command(tmp_path / "a"), env)
    time.sleep(2)
    assert gone.proc.poll() is None  # waiting while its worker lives
    worker.kill()
    worker.wait()
    assert gone.proc.wait(timeout=60) == 0 and not gone.folder.exists()
    monkeypatch.undo()
    monkeypatch.setattr(spare, "IDLE_S", 1.0)
    idle = spare.SpareProgram(_command(tmp_path / "b"), env)
    assert idle.proc.wait(timeout=60) == 0 and not idle.stands_for(idle.command) and not idle.folder.exists()


def test_only_a_runners_command_gets_a_spare():
    assert spare.spare_command([sys.executable, "-c", "print(1)"], Path("/tmp"), "cpu") is None


class Plain(Profiler):
    """A profiler that runs the program as it is: what ncu's capture does around it, less ncu (no GPU here)."""

    name = title = "unitrace"  # a registered profiler's mode: its program runs the forwards plainly

    def capture(self, run):
        proc = run.run(run.runner(self.name, {}), run.timeout_s)
        run.notes.append(f"program exit {proc.returncode}")
        return None


@pytest.mark.parametrize("spare_setting", ["on", "off"])
def test_a_metrics_capture_leaves_a_spare_unless_told_not_to_and_says_where_its_time_went(tmp_path, spare_setting):
    req = ProfileRequest(problem=Source(PROBLEM.read_text(), PROBLEM.name), target="triton", device="cpu")
    settings = Settings.read({**os.environ, "KFORGE_PROFILE_SPARE": spare_setting})
    report, spares = ProfileReport(), Spares()
    try:
        early = capture.EarlyCapture(report, req, tmp_path, Plain(), settings, spares)
        early.thread.start()
        early.finish(report)
        assert "program exit 0" in report.notes
        assert {"metrics_profiler_ready", "metrics_profiler_forward", "metrics_profiler_exit"} <= set(report.phases)
        assert (spares.spare is not None) == (spare_setting == "on")
    finally:
        spares.close()


def test_a_spare_launched_before_any_profile_is_taken_by_the_first(tmp_path):
    """What a verify leaves (profiling/ahead.py): no spec yet, so the device is given; a second leave keeps it."""
    spares, env = Spares(), child_environment()
    try:
        ahead = capture.runner_argv(Path("ahead-spec.json"))
        spares.leave(ahead, env, "cpu")
        waiting = spares.spare
        assert waiting is not None and waiting.device == "cpu" and waiting.stands_for(_command(tmp_path / "c"))
        spares.leave(ahead, env, "cpu")
        assert spares.spare is waiting  # one waits already: not launched again
        time.sleep(3)
        first = capture._run(_command(tmp_path / "a"), tmp_path / "a", 120, spares)
        assert first.returncode == 0, first.stderr[-2000:]
        assert waiting.proc.returncode == 0 and not waiting.folder.exists()  # it ran the first capture
    finally:
        spares.close()


def test_the_profilers_are_readied_in_a_worker_that_has_worked_only_when_asked_after_work(tmp_path):
    """The pool runs the profilers' warm-up after a real job only with after_work; on the CPU no metrics profiler
    runs, so the worker launches no spare."""
    from kforge_mcp.core.requests import Done, ProbeRequest, WarmUpRequest
    from kforge_mcp.runtime.pool import WorkerPool

    pool = WorkerPool(tmp_path, settings=Settings.read())
    ready = WarmUpRequest(device="cpu", stage="profilers")
    try:
        assert isinstance(pool.run("cpu", ProbeRequest(), 120), Done)
        assert pool.run("cpu", ready, 120, warm_up=True) is None  # a server-start warm-up: not after real work
        after = pool.run("cpu", ready, 120, warm_up=True, after_work=True)
        assert isinstance(after, Done) and after.value["steps"] == {"spare": False}, after
    finally:
        pool.shutdown()


@pytest.mark.parametrize("setting", ["on", "off"])
def test_a_gpu_verify_asks_for_the_profilers_ahead_unless_told_not_to(setting):
    import threading
    from types import SimpleNamespace

    from kforge_mcp.engine.verify import profilers_soon

    asked, done = [], threading.Event()

    def warm_up(lane, request, timeout_s, after_work=False):
        asked.append((lane, request.stage, after_work))
        done.set()

    settings = Settings.read({**os.environ, "KFORGE_PROFILE_SPARE": setting})
    parts = SimpleNamespace(settings=settings, executor=SimpleNamespace(warm_up=warm_up))
    profilers_soon(parts, "cpu")  # no metrics profiler runs on the CPU: nothing to launch ahead
    profilers_soon(parts, "cuda:0")
    done.wait(10 if setting == "on" else 1)
    assert asked == ([("cuda:0", "profilers", True)] if setting == "on" else [])
