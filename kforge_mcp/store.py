"""The run store: every loop run and every attempt in it, in SQLite (WAL) at <KFORGE_HOME>/runs.db.

One connection per call (SQLite connections are cheap and this keeps the store safe from any
thread); WAL lets readers (resources, the CLI) look while a loop writes. Runs survive restarts.

A driven run records its owner (pid, host, the process's start time) and a heartbeat. Reading a
run whose owner is gone (the pid is dead or reused on this host; no heartbeat for STALE_S from
another host) marks it 'interrupted', which ``resume`` continues from its last attempt. Runs
driven by a client (loop_start / loop_submit) have no owner and are never marked.
"""

from __future__ import annotations

import difflib
import json
import os
import socket
import sqlite3
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr

from kforge_mcp.core.errors import InputError, KforgeError

RunStatus = Literal["running", "done", "failed", "stopped", "interrupted"]
HOST = socket.gethostname()
HEARTBEAT_S = 30.0  # how often a driver touches its run
STALE_S = 10 * HEARTBEAT_S  # a run owned on another host is dead after this long without a heartbeat
Pass = Literal["functional", "optimize"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    problem TEXT NOT NULL,
    problem_name TEXT,
    target TEXT NOT NULL,
    provider TEXT,
    status TEXT NOT NULL,
    stop_reason TEXT,
    options TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL,
    updated REAL NOT NULL,
    best_attempt INTEGER,
    owner_pid INTEGER,
    owner_host TEXT,
    owner_started REAL,
    heartbeat REAL
);
CREATE TABLE IF NOT EXISTS attempts (
    run_id TEXT NOT NULL REFERENCES runs(id),
    idx INTEGER NOT NULL,
    pass TEXT NOT NULL,
    prompt TEXT,
    reply TEXT,
    candidate TEXT,
    compile_report TEXT,
    verify_report TEXT,
    recommendations TEXT,
    error TEXT,
    speedup REAL,
    correct INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    tokens INTEGER,
    round INTEGER,
    PRIMARY KEY (run_id, idx)
);
"""


RUN_SELECT = (  # a run with its attempt count and tokens spent
    "SELECT r.*, (SELECT COUNT(*) FROM attempts a WHERE a.run_id = r.id) AS n,"
    " (SELECT COALESCE(SUM(a.tokens), 0) FROM attempts a WHERE a.run_id = r.id) AS tokens FROM runs r"
)


class Attempt(BaseModel):
    run_id: str
    index: int
    pass_: Pass = Field(alias="pass", serialization_alias="pass")
    prompt: str | None = None
    reply: str | None = Field(None, description="the generation agent's raw reply")
    candidate: str | None = Field(None, description="the code extracted from the reply (None: nothing usable)")
    compile_report: dict[str, Any] | None = None
    verify_report: dict[str, Any] | None = None
    recommendations: list[dict[str, Any]] | None = None
    error: str | None = Field(None, description="why the attempt could not be checked (e.g. no ModelNew in the reply)")
    speedup: float | None = None
    correct: bool = False
    created: float = 0.0
    tokens: int | None = Field(
        None,
        description="tokens the reply cost, prompt + completion (the provider's count, "
        "or an estimate of len(text)/4 where none is reported); None: unknown",
    )
    round: int | None = Field(
        None,
        description="the loop round it was generated in (the replies of one round "
        "answer the same prompt); None in stores written before rounds",
    )

    model_config = {"populate_by_name": True}


class Run(BaseModel):
    id: str
    problem: str
    problem_name: str | None = None
    target: str
    provider: str | None = None
    status: RunStatus
    stop_reason: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    created: float
    updated: float
    best_attempt: int | None = None
    attempts: int = 0
    tokens: int = Field(0, description="tokens spent by the run's attempts so far (those with a known count)")
    owner_pid: int | None = Field(None, description="the process driving the run (None: driven by a client)")
    owner_host: str | None = None
    heartbeat: float | None = Field(None, description="when the driving process last said it was alive")
    _owner_started: float | None = PrivateAttr(None)  # the owner's start time: a reused pid is not the owner


def _dumps(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value)


def _loads(text):
    return None if text is None else json.loads(text)


def _proc_stat(pid: int) -> tuple[str, float] | None:
    """(state, start time in clock ticks) of a process from /proc; None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return fields[0], float(fields[19])


def _started(pid: int) -> float | None:
    stat = _proc_stat(pid)
    return stat[1] if stat else None


def owner_alive(pid: int, host: str | None, started: float | None, heartbeat: float | None) -> bool:
    if host != HOST:  # another machine: only its heartbeat tells
        return heartbeat is not None and time.time() - heartbeat < STALE_S
    if os.path.isdir("/proc/self"):
        stat = _proc_stat(pid)
        # gone, a zombie, or the pid reused by a newer process
        return stat is not None and stat[0] != "Z" and (started is None or stat[1] == started)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


class RunStore:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db, db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)
            have = {r["name"] for r in db.execute("PRAGMA table_info(runs)")}
            for col, kind in (
                ("owner_pid", "INTEGER"),
                ("owner_host", "TEXT"),
                ("owner_started", "REAL"),
                ("heartbeat", "REAL"),
            ):
                if col not in have:  # a store written before runs had owners
                    db.execute(f"ALTER TABLE runs ADD COLUMN {col} {kind}")
            have = {r["name"] for r in db.execute("PRAGMA table_info(attempts)")}
            for col, kind in (("tokens", "INTEGER"), ("round", "INTEGER")):
                if col not in have:  # a store written before token counts and rounds
                    db.execute(f"ALTER TABLE attempts ADD COLUMN {col} {kind}")

    @classmethod
    def for_home(cls, home: Path | str) -> RunStore:
        return cls(Path(home) / "runs.db")

    def _connect(self) -> sqlite3.Connection:
        from kforge_mcp.core.home import (
            connect_store,
        )  # a read-only or full home: a KforgeError naming the file and cause

        db = connect_store(self.path, timeout=30.0)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA busy_timeout=30000")
        return db

    # ---- runs ----

    def create_run(
        self,
        problem: str,
        target: str,
        provider: str | None = None,
        problem_name: str | None = None,
        options: dict | None = None,
    ) -> Run:
        now = time.time()
        run_id = uuid.uuid4().hex[:12]
        with closing(self._connect()) as db, db:
            db.execute(
                "INSERT INTO runs (id, problem, problem_name, target, provider, status, options, created, updated)"
                " VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?)",
                (run_id, problem, problem_name, target, provider, json.dumps(options or {}), now, now),
            )
        return self.get_run(run_id)

    def get_run(self, run_id: str) -> Run:
        """The run with this id, or with the one id this prefix starts (callers go on with ``run.id``)."""
        with closing(self._connect()) as db:
            row = db.execute(RUN_SELECT + " WHERE r.id = ?", (run_id,)).fetchone()
            if row is None:
                ids = [r[0] for r in db.execute("SELECT id FROM runs ORDER BY created DESC")]
                starting = [i for i in ids if run_id and i.startswith(run_id)]
                if len(starting) == 1:
                    row = db.execute(RUN_SELECT + " WHERE r.id = ?", (starting[0],)).fetchone()
                elif len(starting) > 1:
                    raise InputError(
                        f"run id prefix '{run_id}' matches {len(starting)} runs ({', '.join(starting[:5])}"
                        f"{', ...' if len(starting) > 5 else ''}): give more of the id"
                    )
        if row is None:
            raise InputError(self._unknown(run_id, ids))
        return self._reaped(self._run(row))

    def resolve_id(self, run_id: str) -> str:
        """The full id of a run given by its id or a unique prefix of it."""
        return self.get_run(run_id).id

    def _unknown(self, run_id: str, ids: list[str]) -> str:
        if not ids:
            return f"unknown run_id '{run_id}': no runs recorded in {self.path}"
        close = [i for i in ids if run_id and i.startswith(run_id)][:3]
        close += [i for i in difflib.get_close_matches(run_id, ids, n=3, cutoff=0.4) if i not in close]
        hint = f"closest: {', '.join(close[:3])}" if close else f"latest: {', '.join(ids[:3])}"
        return f"unknown run_id '{run_id}'; {hint} (all in kforge://runs)"

    def list_runs(self, limit: int = 100) -> list[Run]:
        with closing(self._connect()) as db:
            rows = db.execute(RUN_SELECT + " ORDER BY r.created DESC LIMIT ?", (limit,)).fetchall()
        return [self._reaped(self._run(r)) for r in rows]

    @staticmethod
    def _run(row) -> Run:
        run = Run(
            id=row["id"],
            problem=row["problem"],
            problem_name=row["problem_name"],
            target=row["target"],
            provider=row["provider"],
            status=row["status"],
            stop_reason=row["stop_reason"],
            options=json.loads(row["options"] or "{}"),
            created=row["created"],
            updated=row["updated"],
            best_attempt=row["best_attempt"],
            attempts=row["n"],
            tokens=row["tokens"],
            owner_pid=row["owner_pid"],
            owner_host=row["owner_host"],
            heartbeat=row["heartbeat"],
        )
        run._owner_started = row["owner_started"]
        return run

    # ---- owners: who drives a run, and runs whose driver died ----

    def _reaped(self, run: Run) -> Run:
        """The run, marked 'interrupted' when it says running but its owner is gone."""
        if run.status != "running" or run.owner_pid is None:
            return run
        if owner_alive(run.owner_pid, run.owner_host, run._owner_started, run.heartbeat):
            return run
        reason = (
            f"interrupted: its process (pid {run.owner_pid} on {run.owner_host}) stopped while running; "
            f"resume with `kforge run-loop --resume {run.id}` or run_loop(run_id='{run.id}')"
        )
        try:
            with closing(self._connect()) as db, db:  # only if nobody claimed it meanwhile
                db.execute(
                    "UPDATE runs SET status = 'interrupted', stop_reason = ?, updated = ?"
                    " WHERE id = ? AND status = 'running' AND owner_pid = ? AND owner_host IS ?",
                    (reason, time.time(), run.id, run.owner_pid, run.owner_host),
                )
        except (KforgeError, sqlite3.Error):  # a read-only or full home: still read it as interrupted
            return run.model_copy(update={"status": "interrupted", "stop_reason": reason})
        return self.get_run(run.id)

    def reap(self) -> list[str]:
        """Mark every running run whose owner is gone as interrupted; their ids (e.g. at server start)."""
        with closing(self._connect()) as db:
            ids = [r[0] for r in db.execute("SELECT id FROM runs WHERE status = 'running' AND owner_pid IS NOT NULL")]
        return [i for i in ids if self.get_run(i).status == "interrupted"]

    def claim(self, run_id: str) -> Run:
        """Make this process the run's owner and mark it running. Refused while another live process drives it."""
        pid = os.getpid()
        run = self.get_run(run_id)
        if run.status == "running" and run.owner_pid is not None and (run.owner_pid, run.owner_host) != (pid, HOST):
            raise InputError(
                f"run '{run_id}' is being driven by pid {run.owner_pid} on {run.owner_host}; stop that process first"
            )
        now = time.time()
        with closing(self._connect()) as db, db:
            db.execute(
                "UPDATE runs SET status = 'running', stop_reason = NULL, owner_pid = ?, owner_host = ?,"
                " owner_started = ?, heartbeat = ?, updated = ? WHERE id = ?",
                (pid, HOST, _started(pid), now, now, run_id),
            )
        return self.get_run(run_id)

    def heartbeat(self, run_id: str) -> None:
        with closing(self._connect()) as db, db:
            db.execute(
                "UPDATE runs SET heartbeat = ? WHERE id = ? AND owner_pid = ? AND owner_host = ?",
                (time.time(), run_id, os.getpid(), HOST),
            )

    def update_run(self, run_id: str, **fields) -> None:
        allowed = {"status", "stop_reason", "best_attempt", "provider", "options"}
        bad = set(fields) - allowed
        if bad:
            raise ValueError(f"cannot update {sorted(bad)}")
        if "options" in fields:
            fields["options"] = json.dumps(fields["options"])
        fields["updated"] = time.time()
        cols = ", ".join(f"{k} = ?" for k in fields)
        with closing(self._connect()) as db, db:
            db.execute(f"UPDATE runs SET {cols} WHERE id = ?", (*fields.values(), run_id))

    # ---- attempts ----

    def add_attempt(
        self,
        run_id: str,
        pass_: Pass,
        prompt: str | None = None,
        reply: str | None = None,
        candidate: str | None = None,
        compile_report=None,
        verify_report=None,
        recommendations=None,
        error: str | None = None,
        speedup: float | None = None,
        correct: bool = False,
        tokens: int | None = None,
        round: int | None = None,
    ) -> Attempt:
        """Record the run's next attempt. Safe from several threads or processes at once: the index is
        read and written in one IMMEDIATE transaction (the write lock), so each attempt gets its own."""
        now = time.time()
        with closing(self._connect()) as db, db:
            db.execute("BEGIN IMMEDIATE")  # the index is read and written in one transaction
            idx = db.execute("SELECT COALESCE(MAX(idx) + 1, 0) FROM attempts WHERE run_id = ?", (run_id,)).fetchone()[0]
            recs = (
                [r.model_dump(mode="json") if isinstance(r, BaseModel) else r for r in recommendations]
                if recommendations is not None
                else None
            )
            db.execute(
                "INSERT INTO attempts (run_id, idx, pass, prompt, reply, candidate, compile_report, verify_report,"
                " recommendations, error, speedup, correct, created, tokens, round)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    run_id,
                    idx,
                    pass_,
                    prompt,
                    None if reply is None else str(reply),
                    candidate,
                    _dumps(compile_report),
                    _dumps(verify_report),
                    _dumps(recs),
                    error,
                    speedup,
                    int(bool(correct)),
                    now,
                    tokens,
                    round,
                ),
            )
            db.execute("UPDATE runs SET updated = ? WHERE id = ?", (now, run_id))
        return self.get_attempt(run_id, idx)

    def set_recommendations(self, run_id: str, index: int, recommendations) -> None:
        recs = [r.model_dump(mode="json") if isinstance(r, BaseModel) else r for r in recommendations]
        with closing(self._connect()) as db, db:
            db.execute(
                "UPDATE attempts SET recommendations = ? WHERE run_id = ? AND idx = ?",
                (json.dumps(recs), run_id, index),
            )
            # new advice is a change of the run: watchers (tools/run_watch.py) compare `updated`
            db.execute("UPDATE runs SET updated = ? WHERE id = ?", (time.time(), run_id))

    def get_attempt(self, run_id: str, index: int) -> Attempt:
        with closing(self._connect()) as db:
            row = db.execute("SELECT * FROM attempts WHERE run_id = ? AND idx = ?", (run_id, index)).fetchone()
        if row is None:
            raise InputError(f"run '{run_id}' has no attempt {index}")
        return self._attempt(row)

    def attempts(self, run_id: str) -> list[Attempt]:
        with closing(self._connect()) as db:
            rows = db.execute("SELECT * FROM attempts WHERE run_id = ? ORDER BY idx", (run_id,)).fetchall()
        return [self._attempt(r) for r in rows]

    @staticmethod
    def _attempt(row) -> Attempt:
        return Attempt(
            run_id=row["run_id"],
            index=row["idx"],
            pass_=row["pass"],
            prompt=row["prompt"],
            reply=row["reply"],
            candidate=row["candidate"],
            compile_report=_loads(row["compile_report"]),
            verify_report=_loads(row["verify_report"]),
            recommendations=_loads(row["recommendations"]),
            error=row["error"],
            speedup=row["speedup"],
            correct=bool(row["correct"]),
            created=row["created"],
            tokens=row["tokens"],
            round=row["round"],
        )

    def best(self, run_id: str) -> Attempt | None:
        run = self.get_run(run_id)
        return None if run.best_attempt is None else self.get_attempt(run_id, run.best_attempt)
