"""The SQLite run store: runs and attempts survive a new store instance, and threads can write at once."""

from __future__ import annotations

import threading

import pytest

from kforge_mcp.errors import InputError
from kforge_mcp.store import RunStore


def test_runs_and_attempts_survive_a_new_store(tmp_path):
    store = RunStore.for_home(tmp_path)
    run = store.create_run("class Model: ...", "triton", provider="sampling", problem_name="p.py", options={"max_iterations": 3})
    assert run.status == "running" and run.attempts == 0
    a0 = store.add_attempt(run.id, "functional", prompt="P0", reply="R0", error="no ModelNew")
    a1 = store.add_attempt(run.id, "functional", prompt="P1", candidate="class ModelNew: ...",
                           verify_report={"verdict": "pass", "speedup": 1.5}, speedup=1.5, correct=True)
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
