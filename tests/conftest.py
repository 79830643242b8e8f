"""Shared fixtures: one engine (and so one set of warm workers) for the whole session, and a
real MCP client connected to the real server in-process."""

from __future__ import annotations

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
