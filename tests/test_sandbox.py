"""The sandbox around candidate code (one hostile candidate per protection, each through the
engine), the rules for paths, and the HTTP transport's guards (Host, Origin, token, size)."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, example, hostile, problem, processes_with_env

from kforge_mcp.api import Engine
from kforge_mcp.core.errors import InputError
from kforge_mcp.core.problem import resolve_source
from kforge_mcp.runtime import landlock, sandbox
from kforge_mcp.runtime.environment import worker_environment

SOFTMAX = problem("row_softmax")
HONEST = example("row_softmax", "triton")
IS_ROOT = os.geteuid() == 0
MAX_PROCS = 64


@pytest.fixture(scope="module")
def sandboxed(tmp_path_factory):
    """An engine of its own: a low process cap, a fake ~ we can inspect, a secret in the env."""
    fake_home = tmp_path_factory.mktemp("fake-user-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KFORGE_SANDBOX_MAX_PROCS", str(MAX_PROCS))
        mp.setenv("HOME", str(fake_home))
        mp.setenv("KFORGE_TEST_API_KEY", "sk-secret")
        mp.delenv("KFORGE_SANDBOX", raising=False)
        mp.delenv("KFORGE_SANDBOX_DISABLE", raising=False)
        eng = Engine(home=tmp_path_factory.mktemp("sandbox-home"))
        try:
            yield eng, fake_home
        finally:
            eng.close()


def verify(engine, candidate: str):
    return engine.verify(SOFTMAX, candidate, target="triton", trials=1, baselines=["eager"])


def assert_still_serving(engine) -> None:
    assert verify(engine, HONEST).verdict == "pass"


# ---- what is active ----


LANDLOCK_APPLIES = landlock.landlock_abi() > 0 and not os.path.exists(sandbox.NVIDIA_CONTROL_DEVICE)


@pytest.mark.slow
def test_sandbox_status_is_reported(sandboxed):
    engine, _ = sandboxed
    status = engine.list_targets().host["sandbox"]
    for name in ("landlock:", "network:", "limits:", "cgroup:"):
        assert name in status, status
    assert "limits: on" in status and "nofile" in status and "cpu" in status
    if LANDLOCK_APPLIES:
        assert "landlock: on" in status, status
    elif landlock.landlock_abi() > 0:
        assert sandbox.LANDLOCK_OFF_WITH_NVIDIA in status, status
    if IS_ROOT:  # root may unshare a network namespace and (here) has a pids cgroup
        assert "network: on" in status, status
    if sandbox._pids_cgroup_root() is not None and IS_ROOT:
        assert f"cgroup: on (pids.max {MAX_PROCS})" in status, status


def test_each_protection_can_be_turned_off():
    assert not sandbox.enabled("landlock", {"KFORGE_SANDBOX": "off"})
    assert not sandbox.enabled("network", {"KFORGE_SANDBOX_DISABLE": "network,cgroup"})
    assert sandbox.enabled("landlock", {"KFORGE_SANDBOX_DISABLE": "network,cgroup"})
    assert sandbox.enabled("limits", {})


def test_worker_environment_points_temp_files_and_caches_into_writable_dirs(tmp_path):
    env = worker_environment(
        "cpu", tmp_path / "home", tmp_path / "tmp", base={"TMPDIR": "/elsewhere", "KFORGE_SANDBOX_MAX_PROCS": "7"}
    )
    assert env["TMPDIR"] == str(tmp_path / "tmp") and env["KFORGE_SANDBOX_MAX_PROCS"] == "7"
    writable = sandbox.writable_dirs(env)
    assert str(tmp_path / "home") not in writable  # the home itself (run store, compile cache) is not
    assert not any(Path(d) == tmp_path / "home" / "cache" / "compile" for d in writable)
    assert str(tmp_path / "home" / "cache" / "triton") in writable
    off = worker_environment("cpu", tmp_path / "home", tmp_path / "tmp", base={"TMPDIR": "/x", "KFORGE_SANDBOX": "off"})
    assert off["TMPDIR"] == "/x"


# ---- one hostile candidate per protection ----


@pytest.mark.slow
def test_secrets_stay_out(sandboxed):
    engine, _ = sandboxed
    report = verify(engine, hostile("env_probe"))
    assert report.correct and not report.errors, report.errors


@pytest.mark.slow
def test_reading_an_api_key_fails_and_the_verdict_says_why(sandboxed):
    engine, _ = sandboxed
    assert os.environ["KFORGE_TEST_API_KEY"] == "sk-secret"  # the server has it
    report = verify(engine, hostile("hostile_env_key"))
    assert report.verdict in ("error", "fail") and not report.correct
    text = "\n".join(report.errors)
    assert "KeyError: 'KFORGE_TEST_API_KEY'" in text and "sk-secret" not in report.model_dump_json(), text
    assert_still_serving(engine)


@pytest.mark.slow
@pytest.mark.skipif(landlock.landlock_abi() == 0 and not IS_ROOT, reason="neither Landlock TCP rules nor a netns")
def test_no_network(sandboxed):
    engine, _ = sandboxed
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        source = Path(hostile("hostile_network")).read_text().replace("PORT = 0", f"PORT = {port}")
        report = verify(engine, source)
        assert report.verdict in ("error", "fail") and not report.correct
        text = "\n".join(report.errors)
        assert "unreachable" in text.lower() or "permission denied" in text.lower(), text
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody got through
    assert_still_serving(engine)


@pytest.mark.slow
@pytest.mark.skipif(not LANDLOCK_APPLIES, reason="Landlock is not available here, or off beside an NVIDIA driver")
@pytest.mark.parametrize(
    "name, target",
    [
        ("hostile_write_store", "runs.db"),
        ("hostile_write_cache", "cache/compile/poisoned.json"),
        ("hostile_write_home", "~/.kforge_pwned"),
    ],
)
def test_no_writes_outside_the_sandbox(sandboxed, name, target):
    engine, fake_home = sandboxed
    report = verify(engine, hostile(name))
    assert report.verdict in ("error", "fail") and not report.correct
    assert "Permission denied" in "\n".join(report.errors), report.errors
    path = fake_home / target[2:] if target.startswith("~/") else engine.home / target
    assert not path.exists()
    assert_still_serving(engine)


@pytest.mark.slow
@pytest.mark.skipif(IS_ROOT and sandbox._pids_cgroup_root() is None, reason="root without a pids cgroup: no cap")
def test_fork_bomb_is_stopped_by_the_process_cap(sandboxed):
    engine, _ = sandboxed
    started = time.monotonic()
    report = verify(engine, hostile("hostile_fork"))
    assert time.monotonic() - started < 120
    assert report.verdict in ("error", "fail") and not report.correct
    text = "\n".join(report.errors)
    assert "fork refused after" in text and "Resource temporarily unavailable" in text, text
    assert_still_serving(engine)  # the worker and every child it left were replaced


# ---- the process cap without a pids cgroup ----


@pytest.fixture(scope="module")
def no_cgroup(tmp_path_factory):
    """An engine whose workers get no pids cgroup: the fallback cap has to hold."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KFORGE_SANDBOX_MAX_PROCS", str(MAX_PROCS))
        mp.setenv("KFORGE_SANDBOX_DISABLE", "cgroup")
        mp.delenv("KFORGE_SANDBOX", raising=False)
        eng = Engine(home=tmp_path_factory.mktemp("no-cgroup-home"))
        try:
            yield eng
        finally:
            eng.close()


def worker_processes(engine) -> list[int]:
    """Every process that inherited this engine's worker environment (workers and their forks)."""
    return processes_with_env(f"KFORGE_WORKER_TMP={engine.pool.tmp}")


def test_without_a_cgroup_the_status_names_the_fallback_cap(no_cgroup):
    status = no_cgroup.list_targets().host["sandbox"]
    assert "cgroup: off (disabled)" in status, status
    assert f"process cap: server watchdog (kills the worker's process tree above {MAX_PROCS} tasks" in status, status
    assert "not a subreaper" not in status, status
    if not IS_ROOT:
        assert f"RLIMIT_NPROC {MAX_PROCS}" in status, status


@pytest.mark.slow
def test_without_a_cgroup_a_fork_bomb_is_still_stopped(no_cgroup):
    started = time.monotonic()
    report = verify(no_cgroup, hostile("hostile_fork"))
    assert time.monotonic() - started < 120
    assert report.verdict == "error" and not report.correct
    text = "\n".join(report.errors)
    if IS_ROOT:  # RLIMIT_NPROC does not hold for root: the watchdog must have killed it
        assert f"started more than {MAX_PROCS} processes and threads" in text, text
    else:  # either one may stop it first
        assert "processes and threads" in text or "fork refused after" in text, text
    time.sleep(0.5)
    assert len(worker_processes(no_cgroup)) <= 2, "children of the killed worker are still alive"
    assert_still_serving(no_cgroup)


@pytest.mark.slow
def test_without_a_cgroup_an_orphaned_fork_bomb_is_counted_and_killed(no_cgroup):
    """A double fork out of the worker's session: the subreaper keeps it in the tree."""
    report = verify(no_cgroup, hostile("hostile_fork_escape"))
    text = "\n".join(report.errors)
    assert report.verdict == "error" and "processes and threads" in text, (report.verdict, text)
    time.sleep(0.5)
    assert len(worker_processes(no_cgroup)) <= 2, "the orphaned fork bomb survived the kill"
    assert_still_serving(no_cgroup)


def test_kill_tree_reaches_processes_in_other_sessions():
    import subprocess
    import sys

    # a parent that starts a child in a new session and waits: killpg on the parent misses it
    code = (
        "import os,subprocess,sys,time\n"
        "subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'], start_new_session=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        while len(sandbox.tree_pids(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = sandbox.tree_pids(parent.pid)
        assert len(pids) == 2 and sandbox.tree_tasks(parent.pid) >= 2
        sandbox.kill_tree(parent.pid)
        parent.wait(timeout=10)
        child = pids[1]
        deadline = time.monotonic() + 10
        state = "R"
        while time.monotonic() < deadline and state not in ("Z", "X"):  # gone, or dead and not yet reaped
            try:
                state = Path(f"/proc/{child}/stat").read_text().split(")")[-1].split()[0]
            except OSError:
                state = "X"
            time.sleep(0.05)
        assert state in ("Z", "X"), f"the child in its own session survived (state {state})"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


# ---- paths ----


def test_paths_must_lie_under_the_allowed_dirs(tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "ok.py").write_text("x = 1\n")
    secret = tmp_path / "secret.py"
    secret.write_text("API_KEY = 'sk'\n")
    (allowed / "link.py").symlink_to(secret)
    roots = [allowed]
    assert resolve_source(str(allowed / "ok.py"), "candidate", roots).text == "x = 1\n"
    for escape in (str(secret), f"{allowed}/../secret.py", str(allowed / "link.py"), "/etc/../etc/passwd.py"):
        with pytest.raises(InputError, match="outside the allowed directories"):
            resolve_source(escape, "candidate", roots)
    assert resolve_source("import os\nprint(os.getcwd())\n", "candidate", roots).name == "<candidate>"  # text: fine


def test_engine_applies_its_allowed_dirs_before_any_worker(tmp_path):
    outside = tmp_path / "c.py"
    outside.write_text("x = 1\n")
    engine = Engine(home=tmp_path / "home", allow_dirs=[ROOT])
    try:
        with pytest.raises(InputError, match="candidate: .* outside the allowed directories"):
            engine.verify(SOFTMAX, str(outside), target="triton")
        with pytest.raises(InputError, match="problem: .* outside"):
            engine.compile("triton", HONEST, problem=str(outside))
        assert engine.pool._lanes == {}  # refused before any worker started
    finally:
        engine.close()
    default = Engine(home=tmp_path / "home2")
    try:  # library default: the working directory and the system temp dir
        assert Path.cwd().resolve() in default.allow_dirs and len(default.allow_dirs) == 2
    finally:
        default.close()


# ---- HTTP ----

TOKEN = "t0ken-for-tests"


@pytest.fixture(scope="module")
def http_url(engine):
    import uvicorn

    from kforge_mcp import http_transport
    from kforge_mcp.cli.serve import transport_security
    from kforge_mcp.server import build_server

    app = http_transport.build_app(
        build_server(engine), "127.0.0.1", transport_security("127.0.0.1"), token=TOKEN, max_request_bytes=64 * 1024
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    thread.join(timeout=10)


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def post(url, headers=None, **kw):
    import httpx

    return httpx.post(url, headers={**MCP_HEADERS, **(headers or {})}, timeout=30, **kw)


def test_http_needs_the_token(http_url):
    assert post(http_url, json=INIT).status_code == 401
    assert post(http_url, {"Authorization": "Bearer wrong"}, json=INIT).status_code == 401
    assert post(http_url, {"Authorization": f"Basic {TOKEN}"}, json=INIT).status_code == 401
    assert post(http_url, {"Authorization": f"Bearer {TOKEN}"}, json=INIT).status_code == 200


def test_http_checks_host_origin_and_size(http_url):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert post(http_url, {**auth, "Origin": "http://evil.example"}, json=INIT).status_code == 403
    assert post(http_url, {**auth, "Host": "evil.example"}, json=INIT).status_code == 421
    assert post(http_url, {**auth, "Origin": "http://localhost:1234"}, json=INIT).status_code == 200
    big = {**INIT, "params": {**INIT["params"], "pad": "x" * 100_000}}
    assert post(http_url, auth, json=big).status_code == 413


@pytest.mark.anyio
async def test_mcp_client_over_http_with_the_token(http_url):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=300) as http:
        async with Client(streamable_http_client(http_url, http_client=http)) as client:
            result = await client.call_tool("list_targets", {})
    assert not result.is_error
    host = result.structured_content["host"]
    assert "landlock:" in host["sandbox"]
    with pytest.raises(Exception):  # noqa: B017  (no token: the transport fails to initialize)
        async with httpx2.AsyncClient(timeout=30) as http:
            async with Client(streamable_http_client(http_url, http_client=http)) as client:
                await client.list_tools()
