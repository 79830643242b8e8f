"""The run store: every loop run and every attempt in it, in SQLite (WAL) at <KFORGE_HOME>/runs.db.

One connection per call (SQLite connections are cheap and this keeps the store safe from any
thread); WAL lets readers (resources, the CLI) look while a loop writes. Runs survive restarts:
a run whose process died stays 'running' until ``resume`` continues it from its last attempt.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from .errors import InputError

RunStatus = Literal["running", "done", "failed", "stopped"]
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
    best_attempt INTEGER
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
    PRIMARY KEY (run_id, idx)
);
"""


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


def _dumps(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value)


def _loads(text):
    return None if text is None else json.loads(text)


class RunStore:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db, db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)

    @classmethod
    def for_home(cls, home: Path | str) -> "RunStore":
        return cls(Path(home) / "runs.db")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30.0)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA busy_timeout=30000")
        return db

    # ---- runs ----

    def create_run(self, problem: str, target: str, provider: str | None = None, problem_name: str | None = None,
                   options: dict | None = None) -> Run:  # fmt: skip
        now = time.time()
        run_id = uuid.uuid4().hex[:12]
        with closing(self._connect()) as db, db:
            db.execute("INSERT INTO runs (id, problem, problem_name, target, provider, status, options, created, updated)"
                       " VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?)",
                       (run_id, problem, problem_name, target, provider, json.dumps(options or {}), now, now))  # fmt: skip
        return self.get_run(run_id)

    def get_run(self, run_id: str) -> Run:
        with closing(self._connect()) as db:
            row = db.execute("SELECT r.*, (SELECT COUNT(*) FROM attempts a WHERE a.run_id = r.id) AS n"
                             " FROM runs r WHERE r.id = ?", (run_id,)).fetchone()  # fmt: skip
        if row is None:
            raise InputError(f"unknown run_id '{run_id}'")
        return self._run(row)

    def list_runs(self, limit: int = 100) -> list[Run]:
        with closing(self._connect()) as db:
            rows = db.execute("SELECT r.*, (SELECT COUNT(*) FROM attempts a WHERE a.run_id = r.id) AS n"
                              " FROM runs r ORDER BY r.created DESC LIMIT ?", (limit,)).fetchall()  # fmt: skip
        return [self._run(r) for r in rows]

    @staticmethod
    def _run(row) -> Run:
        return Run(id=row["id"], problem=row["problem"], problem_name=row["problem_name"], target=row["target"],
                   provider=row["provider"], status=row["status"], stop_reason=row["stop_reason"],
                   options=json.loads(row["options"] or "{}"), created=row["created"], updated=row["updated"],
                   best_attempt=row["best_attempt"], attempts=row["n"])  # fmt: skip

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

    def add_attempt(self, run_id: str, pass_: Pass, prompt: str | None = None, reply: str | None = None,
                    candidate: str | None = None, compile_report=None, verify_report=None, recommendations=None,
                    error: str | None = None, speedup: float | None = None, correct: bool = False) -> Attempt:  # fmt: skip
        now = time.time()
        with closing(self._connect()) as db, db:
            db.execute("BEGIN IMMEDIATE")  # the index is read and written in one transaction
            idx = db.execute("SELECT COALESCE(MAX(idx) + 1, 0) FROM attempts WHERE run_id = ?", (run_id,)).fetchone()[0]
            recs = [r.model_dump(mode="json") if isinstance(r, BaseModel) else r for r in recommendations] \
                if recommendations is not None else None  # fmt: skip
            db.execute("INSERT INTO attempts (run_id, idx, pass, prompt, reply, candidate, compile_report, verify_report,"
                       " recommendations, error, speedup, correct, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                       (run_id, idx, pass_, prompt, reply, candidate, _dumps(compile_report), _dumps(verify_report),
                        _dumps(recs), error, speedup, int(bool(correct)), now))  # fmt: skip
            db.execute("UPDATE runs SET updated = ? WHERE id = ?", (now, run_id))
        return self.get_attempt(run_id, idx)

    def set_recommendations(self, run_id: str, index: int, recommendations) -> None:
        recs = [r.model_dump(mode="json") if isinstance(r, BaseModel) else r for r in recommendations]
        with closing(self._connect()) as db, db:
            db.execute("UPDATE attempts SET recommendations = ? WHERE run_id = ? AND idx = ?",
                       (json.dumps(recs), run_id, index))  # fmt: skip

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
        return Attempt(run_id=row["run_id"], index=row["idx"], pass_=row["pass"], prompt=row["prompt"],
                       reply=row["reply"], candidate=row["candidate"], compile_report=_loads(row["compile_report"]),
                       verify_report=_loads(row["verify_report"]), recommendations=_loads(row["recommendations"]),
                       error=row["error"], speedup=row["speedup"], correct=bool(row["correct"]), created=row["created"])  # fmt: skip

    def best(self, run_id: str) -> Attempt | None:
        run = self.get_run(run_id)
        return None if run.best_attempt is None else self.get_attempt(run_id, run.best_attempt)
