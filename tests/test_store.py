"""The SQLite run store: runs and attempts survive a new store instance, and threads can write at once."""

from __future__ import annotations

import threading

import pytest

from kforge_mcp.core.errors import InputError
from kforge_mcp.store import RunStore


def test_runs_and_attempts_survive_a_new_store(tmp_path):
    store = RunStore.for_home(tmp_path)
    run = store.create_run(
        "class Model: ...", "triton", provider="sampling", problem_name="p.py", options={"max_iterations": 3}
    )
    assert run.status == "running" and run.attempts == 0
    a0 = store.add_attempt(run.id, "functional", prompt="P0", reply="R0", error="no ModelNew")
    a1 = store.add_attempt(
        run.id,
        "functional",
        prompt="P1",
        candidate="class ModelNew: ...",
        verify_report={"verdict": "pass", "speedup": 1.5},
        speedup=1.5,
        correct=True,
    )
    store.set_recommendations(run.id, 1, [{"title": "fuse"}])
    store.update_run(run.id, best_attempt=1, status="done", stop_reason="max_iterations")
    assert (a0.index, a1.index) == (0, 1)

    again = RunStore(tmp_path / "runs.db")
    got = again.get_run(run.id)
    assert got.status == "done" and got.best_attempt == 1 and got.attempts == 2 and got.options == {"max_iterations": 3}
    attempts = again.attempts(run.id)
    assert attempts[0].error == "no ModelNew" and attempts[0].pass_ == "functional"
    assert attempts[1].verify_report["speedup"] == 1.5 and attempts[1].recommendations == [{"title": "fuse"}]
    assert again.best(run.id).candidate == "class ModelNew: ..."
    assert [r.id for r in again.list_runs()] == [run.id]
    assert attempts[1].model_dump(by_alias=True)["pass"] == "functional"
    with pytest.raises(InputError, match="unknown run_id"):
        again.get_run("nope")
    assert (tmp_path / "runs.db").exists()


def test_threads_append_attempts_without_clashing(tmp_path):
    store = RunStore.for_home(tmp_path)
    run = store.create_run("p", "triton")
    errors = []

    def add():
        try:
            for _ in range(10):
                RunStore.for_home(tmp_path).add_attempt(run.id, "optimize", candidate="x")
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=add) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [a.index for a in store.attempts(run.id)] == list(range(40))


def _set_owner(store, run_id, pid, host, started=None, heartbeat=None):
    import sqlite3

    with sqlite3.connect(store.path) as db:
        db.execute(
            "UPDATE runs SET owner_pid = ?, owner_host = ?, owner_started = ?, heartbeat = ? WHERE id = ?",
            (pid, host, started, heartbeat, run_id),
        )


def test_a_run_whose_owner_is_gone_reads_as_interrupted(tmp_path):
    import os
    import subprocess
    import sys
    import time

    from kforge_mcp.store import HOST, STALE_S

    store = RunStore.for_home(tmp_path)
    mine, dead, reused, remote_dead, remote_alive, client = (store.create_run("p", "triton") for _ in range(6))
    assert store.claim(mine.id).owner_pid == os.getpid()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _set_owner(store, dead.id, int(gone.stdout), HOST)
    _set_owner(store, reused.id, os.getpid(), HOST, started=1.0)  # our pid, but not our process's start time
    _set_owner(store, remote_dead.id, 1, "another-host", heartbeat=time.time() - STALE_S - 1)
    _set_owner(store, remote_alive.id, 1, "another-host", heartbeat=time.time())

    status = {r.id: r.status for r in RunStore(tmp_path / "runs.db").list_runs()}
    assert status == {
        mine.id: "running",
        dead.id: "interrupted",
        reused.id: "interrupted",
        remote_dead.id: "interrupted",
        remote_alive.id: "running",
        client.id: "running",
    }
    assert f"pid {gone.stdout.strip()}" in store.get_run(dead.id).stop_reason
    with pytest.raises(InputError, match="being driven by pid 1 on another-host"):
        store.claim(remote_alive.id)
    assert store.claim(dead.id).status == "running"  # resumable: this process owns it now
    assert store.reap() == []


def test_an_older_store_gains_owner_columns_and_unknown_ids_name_the_closest(tmp_path):
    import sqlite3

    from kforge_mcp.store import SCHEMA

    owner_columns = ",\n    owner_pid INTEGER,\n    owner_host TEXT,\n    owner_started REAL,\n    heartbeat REAL"
    old = SCHEMA.replace(owner_columns, "")
    assert "owner_pid" not in old
    with sqlite3.connect(tmp_path / "runs.db") as db:
        db.executescript(old)
        db.execute(
            "INSERT INTO runs (id, problem, target, status, created, updated) VALUES "
            "('abc123def456', 'p', 'triton', 'running', 1, 1)"
        )
    store = RunStore.for_home(tmp_path)
    run = store.get_run("abc123def456")
    assert run.status == "running" and run.owner_pid is None  # no owner: driven by a client, never reaped
    assert store.get_run("abc123").id == "abc123def456"  # a unique prefix names it
    with pytest.raises(InputError, match=r"unknown run_id 'abc124'; closest: abc123def456"):
        store.get_run("abc124")
    with pytest.raises(InputError, match="no runs recorded"):
        RunStore(tmp_path / "empty.db").get_run("x")


def test_an_older_store_gains_token_and_round_columns(tmp_path):
    import sqlite3

    from kforge_mcp.store import SCHEMA

    old = SCHEMA.replace("    tokens INTEGER,\n    round INTEGER,\n", "")
    assert "tokens" not in old
    with sqlite3.connect(tmp_path / "runs.db") as db:
        db.executescript(old)
        db.execute(
            "INSERT INTO runs (id, problem, target, status, created, updated) VALUES "
            "('abc123def456', 'p', 'triton', 'done', 1, 1)"
        )
        db.execute("INSERT INTO attempts (run_id, idx, pass, created) VALUES ('abc123def456', 0, 'functional', 1)")
    store = RunStore.for_home(tmp_path)
    (a0,) = store.attempts("abc123def456")
    assert a0.tokens is None and a0.round is None  # unknown, not zero
    a1 = store.add_attempt("abc123def456", "functional", reply="r", tokens=42, round=1)
    assert (a1.index, a1.tokens, a1.round) == (1, 42, 1) and store.get_run("abc123def456").tokens == 42
