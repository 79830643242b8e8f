"""The `kforge` CLI and the `kforge-mcp` entry, run for real as subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import ROOT, example, problem

CLI = [sys.executable, "-m", "kforge_mcp.cli"]
UNDEFINED_NAME = """\
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr = 1024):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x * undefined_scale, mask=offs < n)  # line 10
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return {**os.environ, "KFORGE_HOME": str(tmp_path_factory.mktemp("kforge-home"))}


def kforge(env, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([*CLI, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_targets_json(env):
    proc = kforge(env, "targets", "--json")
    assert proc.returncode == 0, proc.stderr
    targets = {t["name"]: t for t in json.loads(proc.stdout)["targets"]}
    assert targets["triton"]["available"] and "cpu" in targets["triton"]["devices"]
    for name in ("cuda", "cute", "metal"):
        assert not targets[name]["available"] and targets[name]["reason"]


def test_compile_reports_kernel_resources(env):
    proc = kforge(env, "compile", example("row_softmax", "triton"), "--target", "triton", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True
    assert report["kernels"] and report["kernels"][0]["registers"] > 0


def test_compile_error_names_the_line(env, tmp_path):
    source = tmp_path / "undefined_name.py"
    source.write_text(UNDEFINED_NAME)
    proc = kforge(env, "compile", str(source), "--target", "triton")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{source}:10:" in proc.stdout  # file:line:col: error: ...
    assert "error" in proc.stdout and "undefined_scale" in proc.stdout


@pytest.mark.slow
def test_verify_pass_json(env):
    proc = kforge(
        env,
        "verify",
        problem("row_softmax"),
        example("row_softmax", "triton"),
        "--target",
        "triton",
        "--trials",
        "2",
        "--baselines",
        "eager",
        "--json",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)  # nothing but the report on stdout
    assert report["verdict"] == "pass" and report["correct"] is True
    assert report["timing"]["eager"] is not None and report["timing"]["compiled"] is None


@pytest.mark.slow
def test_verify_wrong_candidate_fails(env):
    proc = kforge(
        env,
        "verify",
        problem("fused_bias_gelu"),
        example("fused_bias_gelu", "triton_wrong"),
        "--target",
        "triton",
        "--trials",
        "2",
        "--baselines",
        "eager",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL" in proc.stdout
    assert "mismatch" in proc.stdout and "expected" in proc.stdout


def test_a_broken_candidate_is_an_error_verdict_and_exit_1(env):
    """Exit 2 is for what the caller fixes outside the candidate (here: a missing problem file)."""
    candidate = str(ROOT / "tests" / "candidates" / "syntax_error.py")
    args = ("--target", "triton", "--trials", "1", "--baselines", "eager")
    proc = kforge(env, "verify", problem("row_softmax"), candidate, *args)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "verdict ERROR" in proc.stdout and f"{candidate}:5:" in proc.stdout and "SyntaxError" in proc.stdout
    missing = kforge(env, "verify", str(ROOT / "examples" / "no_such_problem.py"), candidate, *args)
    assert missing.returncode == 2 and "problem: file not found" in missing.stderr


def test_unknown_target_is_an_input_error(env):
    proc = kforge(env, "compile", example("row_softmax", "triton"), "--target", "nope")
    assert proc.returncode == 2
    assert "unknown target" in proc.stderr and proc.stdout == ""


def test_serve_refuses_a_remote_host_without_a_token(env):
    env = {k: v for k, v in env.items() if k != "KFORGE_HTTP_TOKEN"}
    proc = kforge(env, "serve", "--transport", "http", "--host", "0.0.0.0", timeout=60)
    assert proc.returncode != 0
    assert "--token" in proc.stderr and "0.0.0.0" in proc.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(proc: subprocess.Popen, port: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the server exited with {proc.returncode}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.25)
    raise AssertionError(f"the server did not listen on port {port} within {timeout} s")


@pytest.mark.anyio
async def test_kforge_mcp_over_http(env, tmp_path):
    from mcp import Client

    script = shutil.which("kforge-mcp", path=str(Path(sys.executable).parent))
    entry = [script] if script else [sys.executable, "-c", "from kforge_mcp.cli import server_main; server_main()"]
    port = free_port()
    with open(tmp_path / "stdout", "w+") as out, open(tmp_path / "stderr", "w+") as err:
        proc = subprocess.Popen(
            [*entry, "--transport", "http", "--port", str(port)], cwd=ROOT, env=env, stdout=out, stderr=err
        )
        try:
            wait_for_port(proc, port)
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                tools = {t.name for t in (await client.list_tools()).tools}
            assert {"list_targets", "compile", "verify"} <= tools
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        banner = (tmp_path / "stderr").read_text()
    assert f"http://127.0.0.1:{port}/mcp" in banner and "kforge" in banner
    assert "kforge 0.1.0" not in (tmp_path / "stdout").read_text()  # the banner never goes to stdout


def test_cli_verbs_read_any_path_the_user_names(env):
    """A local command acts for its user: a candidate outside the working folder and the temp dir
    compiles (only the server keeps an allow-list)."""
    with tempfile.TemporaryDirectory(dir=Path.home(), prefix=".kforge-cli-test-") as folder:
        outside = Path(folder) / "triton.py"
        assert not outside.is_relative_to(ROOT) and not outside.is_relative_to(tempfile.gettempdir())
        shutil.copy(example("row_softmax", "triton"), outside)
        proc = kforge(env, "compile", str(outside), "--target", "triton", "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["ok"] is True


def test_verify_takes_precision_and_seed(env):
    softmax_problem, softmax_candidate = str(ROOT / "tests/cheats/problem.py"), str(ROOT / "tests/cheats/honest.py")
    bad = kforge(env, "verify", softmax_problem, softmax_candidate, "--target", "triton", "--precision", "fp8")
    assert bad.returncode == 2 and "--precision" in bad.stderr
    args = (
        "--target",
        "triton",
        "--precision",
        "fp32",
        "--seed",
        "7",
        "--trials",
        "1",
        "--baselines",
        "eager",
        "--json",
    )
    proc = kforge(env, "verify", softmax_problem, softmax_candidate, *args)
    report = json.loads(proc.stdout)
    assert (report["seed"], report["precision"], report["atol"]) == (7, "fp32", 1e-4), proc.stdout[-500:]


def test_the_server_starts_the_first_gpus_worker_after_its_probe_and_no_other(monkeypatch):
    """...and warms torch.compile there while that GPU is idle: its imports, then a tiny compile, then the metrics
    profiler's program (not with KFORGE_PROFILE_SPARE=off); beside them a CPU worker's paths measurement. None of
    it on the GPU once its lane is not idle (the executor says None), and nothing with KFORGE_GPU_WARMUP=off."""
    from types import SimpleNamespace

    from kforge_mcp.cli.serve import warm_up
    from kforge_mcp.core.schemas import TargetsReport, TargetStatus
    from kforge_mcp.core.settings import Settings

    def engine_with(*statuses, idle_for=2):
        started: list[str] = []
        report = TargetsReport(targets=list(statuses), host={})

        def warm(lane, payload, timeout_s, after_work=False):
            if lane == "compile":  # the probe's lane: a warm-up there runs after its work
                paths.append(f"warm_up {payload.stage} on {lane} after work {after_work}")
                return {"ok": True}
            if len([s for s in started if s.startswith("warm_up")]) >= idle_for:
                return None
            started.append(f"warm_up {payload.stage} on {lane}")
            return {"ok": True}

        executor = SimpleNamespace(prewarm=started.append, warm_up=warm)
        engine = SimpleNamespace(list_targets=lambda: report, executor=executor, settings=Settings.read())
        return engine, started

    paths: list[str] = []
    gpu = TargetStatus(name="cuda", available=True, devices=["cuda:1", "cuda:0"])
    cpu = TargetStatus(name="triton", available=True, devices=["cpu"])
    unavailable = TargetStatus(name="cute", available=False, devices=["cuda:0"], reason="no DSL")
    imports, tiny, ncu = "warm_up imports on cuda:0", "warm_up compile on cuda:0", "warm_up profilers on cuda:0"
    cases = [((gpu, cpu), 3, ["cuda:0", imports, tiny, ncu]), ((cpu, unavailable), 2, [])]
    cases += [((gpu,), 1, ["cuda:0", imports]), ((gpu,), 0, ["cuda:0"])]
    for statuses, idle_for, expected in cases:
        paths.clear()
        engine, started = engine_with(*statuses, idle_for=idle_for)
        warm_up(engine)
        assert started == expected, idle_for
        assert paths == (["warm_up paths on compile after work True"] if gpu in statuses else []), idle_for
    monkeypatch.setenv("KFORGE_PROFILE_SPARE", "off")
    engine, started = engine_with(gpu, idle_for=3)
    warm_up(engine)
    assert started == ["cuda:0", imports, tiny]
    monkeypatch.setenv("KFORGE_GPU_WARMUP", "off")
    paths.clear()
    engine, started = engine_with(gpu)
    warm_up(engine)
    assert started == ["cuda:0"] and paths == []
