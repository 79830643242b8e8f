"""Shared fixtures: one engine (and so one set of warm workers) for the whole session, and a
real MCP client connected to the real server in-process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kforge_mcp.api import Engine
from kforge_mcp.server import build_server

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
CANDIDATES = Path(__file__).resolve().parent / "candidates"


def problem(name: str) -> str:
    return str(EXAMPLES / "problems" / f"{name}.py")


def example(problem_name: str, candidate: str) -> str:
    return str(EXAMPLES / "candidates" / problem_name / f"{candidate}.py")


def hostile(name: str) -> str:
    return str(CANDIDATES / f"{name}.py")


def processes_with_env(entry: str) -> list[int]:
    """Every process whose environment holds ``entry`` (e.g. a worker setting: workers and their forks)."""
    marker, found = entry.encode(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    eng = Engine(home=tmp_path_factory.mktemp("kforge-home"))
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def server(engine):
    return build_server(engine)


@pytest.fixture
def anyio_backend():
    return "asyncio"
