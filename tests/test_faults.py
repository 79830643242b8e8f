"""Faults around a real `kforge serve --transport http` subprocess: kill -9 in the middle of a
client-driven loop (the store stays intact, the run resumable) and a read-only or full engine
home (a clear error naming the path and the cause, at startup and on later writes, while the
server keeps serving). A read-only or tiny home is made honestly, in a private mount namespace
(`unshare -m`: a read-only bind mount, a small tmpfs), so it holds for root too."""

from __future__ import annotations

import errno
import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ROOT, processes_with_env
from http_server import ServerProcess

pytestmark = pytest.mark.anyio

VECTOR_ADD = str(ROOT / "tests/problems/vector_add.py")
VECTOR_ADD_TRITON = str(ROOT / "tests/candidates/vector_add.py")
LOOP_OPTIONS = {"trials": 1, "baselines": ["eager"], "profile": False, "max_iterations": 4}


def _can_unshare_mounts() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_mount_ns = pytest.mark.skipif(not _can_unshare_mounts(), reason="no private mount namespace (unshare -m)")


def text(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def worker_pids(home: Path) -> list[int]:
    """Processes started with this home's worker environment (workers and anything they forked)."""
    return processes_with_env(f"TRITON_CACHE_DIR={home}/cache/triton")


def kill_leftovers(home: Path) -> None:
    for pid in worker_pids(home):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# ---- kill -9 in the middle of a loop ----


def slow_candidate() -> str:
    """The honest vector_add kernel, but its second forward sleeps: compile (which traces one call)
    passes, then verify hangs in the worker."""
    source = Path(VECTOR_ADD_TRITON).read_text()
    head, sep, tail = source.partition("torch.Tensor:\n")
    assert sep, "the forward signature moved"
    hang = "        CALLS.append(1)\n        if len(CALLS) > 1:\n            time.sleep(600)\n"
    return "import time\nCALLS = []\n" + head + sep + hang + tail


@pytest.mark.slow
async def test_kill_9_mid_loop_leaves_the_store_intact_and_the_run_resumable(tmp_path):
    home = tmp_path / "home"
    server = ServerProcess(home).start()
    try:
        async with server.client() as c:
            start = await c.call_tool("loop_start", {"problem": VECTOR_ADD, "target": "triton", **LOOP_OPTIONS})
            assert not start.is_error, text(start)
            run_id = start.structured_content["run_id"]
            # an attempt that compiles, then never ends its verify: the server dies while it is in flight
            sub = await c.call_tool("loop_submit", {"run_id": run_id, "candidate": slow_candidate(), "wait_s": 0})
            assert not sub.is_error, text(sub)
            job_id = sub.structured_content["job_id"]
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # wait until the candidate runs in the cpu worker
                info = (await c.call_tool("job_status", {"job_id": job_id})).structured_content
                progress = info["progress"] or ""
                if info["status"] == "running" and any(
                    w in progress for w in ("trial", "correct", "load", "verif", "determinism")
                ):
                    break
                await _sleep(0.2)
            else:
                pytest.fail(f"the verify never started: {info}")
            await _sleep(1.0)
            assert worker_pids(home), "no worker is running the attempt"
        server.kill(signal.SIGKILL)
        assert server.proc.returncode == -signal.SIGKILL

        # the workers notice their server is gone and take the candidate with them
        deadline = time.monotonic() + 10
        while worker_pids(home) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not worker_pids(home), "workers outlived the killed server"

        with sqlite3.connect(home / "runs.db") as db:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            (status,) = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
            (attempts,) = db.execute("SELECT COUNT(*) FROM attempts WHERE run_id = ?", (run_id,)).fetchone()
        assert status == "running" and attempts == 0  # the cut-off attempt left nothing half-written

        server = ServerProcess(home, log=tmp_path / "restart.log").start()
        async with server.client() as c:
            res = await c.read_resource(f"kforge://runs/{run_id}")
            run = json.loads(res.contents[0].text)
            assert run["id"] == run_id and run["status"] == "running" and run["attempts"] == []
            sub = await c.call_tool("loop_submit", {"run_id": run_id, "candidate": VECTOR_ADD_TRITON, "wait_s": 300})
            assert not sub.is_error, text(sub)
            assert sub.structured_content["attempt"] == 0 and sub.structured_content["verdict"] == "pass"
            run = json.loads((await c.read_resource(f"kforge://runs/{run_id}")).contents[0].text)
            assert len(run["attempts"]) == 1 and run["best_attempt"] == 0
    finally:
        server.stop()
        kill_leftovers(home)


async def _sleep(s: float) -> None:
    import anyio

    await anyio.sleep(s)


# ---- a read-only or full home ----


def _serve_with(home: Path, setup: str, tmp_path: Path, **kw) -> ServerProcess:
    """The server in a private mount namespace where ``setup`` (sh, $0 = the home) ran first."""
    home.mkdir(parents=True, exist_ok=True)
    wrap = ["unshare", "-m", "sh", "-c", f'{setup} && exec "$@"', str(home)]
    return ServerProcess(home, wrap=wrap, log=tmp_path / f"server-{time.monotonic_ns()}.log", **kw)


READ_ONLY = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0"'
FULL = 'mount -t tmpfs -o size=256k tmpfs "$0" && { dd if=/dev/zero of="$0/fill" bs=4k 2>/dev/null; true; }'


@needs_mount_ns
@pytest.mark.parametrize(
    "setup, cause", [(READ_ONLY, "the filesystem is read-only (EROFS)"), (FULL, "the disk is full (ENOSPC)")]
)
def test_unwritable_home_at_startup_is_a_clear_error(tmp_path, setup, cause):
    home = tmp_path / "home"
    server = _serve_with(home, setup, tmp_path).start(timeout_s=60, expect_exit=True)
    assert server.proc.wait(timeout=60) == 2  # EXIT_INPUT: refused, not a traceback
    log = " ".join(server.log_tail().split())  # rich wraps long lines
    assert f"the engine home at {home} cannot be written: {cause}" in log, log
    assert "KFORGE_HOME" in log and "Traceback" not in log


@pytest.mark.slow
@needs_mount_ns
async def test_home_that_fills_up_or_turns_read_only_later_gives_tool_errors(tmp_path):
    home = tmp_path / "home"
    server = _serve_with(home, 'mount -t tmpfs -o size=64m tmpfs "$0"', tmp_path).start()
    inside = Path(f"/proc/{server.proc.pid}/root") / str(home).lstrip("/")  # the home as the server sees it
    compile_args = {"target": "triton", "source": VECTOR_ADD_TRITON, "problem": VECTOR_ADD}
    try:
        async with server.client() as c:
            first = await c.call_tool("loop_start", {"problem": VECTOR_ADD, "target": "triton", **LOOP_OPTIONS})
            assert not first.is_error, text(first)
            ok = await c.call_tool("compile", compile_args)  # fills Triton's own cache while there is room
            assert ok.structured_content["ok"], ok.structured_content

            with open(inside / "filler", "wb") as f:  # now fill the home's filesystem to the last block
                try:
                    while True:
                        f.write(b"\0" * 2**20)
                        f.flush()
                except OSError as e:
                    assert e.errno == errno.ENOSPC
            full = await c.call_tool("loop_start", {"problem": VECTOR_ADD, "target": "triton", **LOOP_OPTIONS})
            assert full.is_error
            assert f"the run store at {home / 'runs.db'} cannot be written: the disk is full" in text(full), text(full)
            # a compile still answers (Triton's cache already holds it); only caching the report fails, and it says so
            again = await c.call_tool("compile", {**compile_args, "emit_ptx": True})
            assert again.structured_content["ok"], again.structured_content
            warnings = [d["message"] for d in again.structured_content["diagnostics"] if d["severity"] == "warning"]
            assert any(
                f"the compile cache at {home / 'cache' / 'compile'}" in w and "the disk is full (ENOSPC)" in w
                for w in warnings
            ), warnings
            assert not (await c.call_tool("list_targets", {})).is_error  # still serving

            (inside / "filler").unlink()
            subprocess.run(
                ["nsenter", "-t", str(server.proc.pid), "-m", "mount", "-o", "remount,ro", str(home)], check=True
            )
            ro = await c.call_tool("loop_start", {"problem": VECTOR_ADD, "target": "triton", **LOOP_OPTIONS})
            assert ro.is_error
            assert f"the run store at {home / 'runs.db'} cannot be written" in text(ro), text(ro)
            assert "read-only" in text(ro), text(ro)
            # reading still works: the run made before is there
            run_id = first.structured_content["run_id"]
            run = json.loads((await c.read_resource(f"kforge://runs/{run_id}")).contents[0].text)
            assert run["id"] == run_id
            assert not (await c.call_tool("list_targets", {})).is_error
        assert server.proc.poll() is None, "the server died"
    finally:
        server.stop()
        kill_leftovers(home)
