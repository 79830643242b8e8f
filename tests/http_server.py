"""`kforge serve --transport http` in a subprocess (its own KFORGE_HOME, a free port, a bearer token), MCP
client sessions to it over streamable HTTP, and the resident memory of the server and its workers (from
/proc): for the tests that need a server process (faults, protocol, tasks, load) and for bench/load_http.py."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from kforge_mcp.runtime.sandbox import tree_pids  # the process tree, as the sandbox walks it

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class MemorySampler:
    """Samples the RSS of the server alone and of its whole tree every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.1):
        self.pid, self.interval = pid, interval
        self.samples: list[tuple[float, int, int, int]] = []  # (time, server, tree, processes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> tuple[int, int, int]:
        pids = tree_pids(self.pid)
        return rss_bytes(self.pid), sum(rss_bytes(p) for p in pids), len(pids)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), *self.sample()))
            self._stop.wait(self.interval)

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def peak_between(self, t0: float, t1: float) -> dict:
        window = [s for s in self.samples if t0 <= s[0] <= t1] or self.samples[-1:]
        return {
            "server_mb": max(s[1] for s in window) / 2**20,
            "tree_mb": max(s[2] for s in window) / 2**20,
            "processes": max(s[3] for s in window),
            "samples": len(window),
        }


class ServerProcess:
    """`kforge serve --transport http` in a subprocess with its own home, port and token."""

    def __init__(
        self,
        home: Path,
        port: int | None = None,
        token: str | None = None,
        env: dict | None = None,
        log: Path | None = None,
        wrap: list[str] | None = None,
    ):
        self.wrap = wrap or []  # e.g. unshare -m ... to give the server a read-only or tiny home
        self.home, self.port = Path(home), port or free_port()
        self.token = token or secrets.token_urlsafe(16)
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log = log or self.home.parent / f"{self.home.name}-server.log"
        self.env = {**os.environ, "KFORGE_HOME": str(self.home), **(env or {})}
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 120.0, expect_exit: bool = False) -> ServerProcess:
        cmd = [
            *self.wrap,
            sys.executable,
            "-m",
            "kforge_mcp.cli",
            "serve",
            "--transport",
            "http",
            "--port",
            str(self.port),
            f"--token={self.token}",
        ]  # a token may start with "-"
        self._log = open(self.log, "ab")
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if expect_exit:
                    self._log.close()
                    return self
                raise RuntimeError(
                    f"the server exited with {self.proc.returncode} before listening:\n{self.log_tail()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"the server did not listen on {self.port} within {timeout_s:g} s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the server only (as a crash would): its workers notice the closed pipe and exit."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()

    def stop(self) -> None:
        self.kill(signal.SIGINT)

    def client(self, timeout: float = 600):
        """An MCP client session over streamable HTTP with the bearer token (an async context manager)."""
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        return _ClientCM(
            lambda: httpx2.AsyncClient(headers={"Authorization": f"Bearer {self.token}"}, timeout=timeout),
            lambda http: Client(streamable_http_client(self.url, http_client=http)),
        )


class _ClientCM:
    def __init__(self, make_http, make_client):
        self.make_http, self.make_client = make_http, make_client

    async def __aenter__(self):
        self.http = await self.make_http().__aenter__()
        self.client = self.make_client(self.http)
        return await self.client.__aenter__()

    async def __aexit__(self, *exc):
        try:
            await self.client.__aexit__(*exc)
        finally:
            await self.http.__aexit__(*exc)
