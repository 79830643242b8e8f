"""What the worker boundary promises: secrets stay out, memory and time are bounded,
and the server never runs candidate code itself."""

from __future__ import annotations

import sys

import pytest
from conftest import example, hostile, problem

from kforge_mcp.api import Engine
from kforge_mcp.runtime.environment import worker_environment

SOFTMAX = problem("row_softmax")


def test_worker_environment_drops_secrets_and_sets_the_lane(tmp_path):
    env = worker_environment(
        "cpu",
        tmp_path,
        tmp_path,
        base={
            "PATH": "/usr/bin",
            "ANTHROPIC_API_KEY": "sk-1",
            "OPENAI_API_KEY": "sk-2",
            "GITHUB_TOKEN": "t",
            "CUDA_VISIBLE_DEVICES": "0",
            "TRITON_AUTH_TOKEN": "x",
            "KFORGE_HTTP_TOKEN": "y",
            "TRITON_INTERPRET": "0",
        },
    )
    assert env["PATH"] == "/usr/bin" and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert not {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GITHUB_TOKEN", "TRITON_AUTH_TOKEN", "KFORGE_HTTP_TOKEN"} & set(
        env
    )
    assert env["TRITON_INTERPRET"] == "1"
    assert "TRITON_INTERPRET" not in worker_environment("cuda:0", tmp_path, tmp_path, base={"TRITON_INTERPRET": "1"})


def test_candidate_cannot_see_server_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("KFORGE_TEST_API_KEY", "sk-secret")
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "secret")
    engine = Engine(home=tmp_path)
    try:
        report = engine.verify(SOFTMAX, hostile("env_probe"), target="triton", trials=1, baselines=["eager"])
    finally:
        engine.close()
    assert report.correct and not report.errors, report.errors  # (it uses torch.softmax: suspicious, not an error)


@pytest.mark.slow
def test_memory_hog_is_killed_and_the_engine_recovers(tmp_path):
    engine = Engine(home=tmp_path, memory_limit_mb=2048)
    try:
        report = engine.verify(SOFTMAX, hostile("memory_hog"), target="triton", trials=1, baselines=["eager"])
        assert report.verdict == "error"
        assert "more than 2.0 GiB of memory" in report.errors[0]
        again = engine.verify(SOFTMAX, example("row_softmax", "triton"), target="triton", trials=1, baselines=["eager"])
        assert again.verdict == "pass"
    finally:
        engine.close()


@pytest.mark.slow
def test_candidate_code_never_runs_in_the_server_process(engine):
    before = set(sys.modules)
    report = engine.verify(SOFTMAX, example("row_softmax", "triton"), target="triton", trials=1, baselines=["eager"])
    assert report.verdict == "pass"
    assert not {m for m in set(sys.modules) - before if m.startswith("kforge_candidate")}


@pytest.mark.slow
def test_import_time_crash_is_an_error_verdict(engine, tmp_path):
    source = "import os\nos._exit(3)\n"
    report = engine.verify(SOFTMAX, source, target="triton", trials=1, baselines=["eager"])
    assert report.verdict == "error" and "exit code 3" in report.errors[0]
    assert (
        engine.verify(SOFTMAX, example("row_softmax", "triton"), target="triton", trials=1, baselines=["eager"]).verdict
        == "pass"
    )


@pytest.mark.parametrize("atol", [None, 1e-2])
def test_tolerance_is_settable(engine, atol):
    report = engine.verify(
        problem("fused_bias_gelu"),
        example("fused_bias_gelu", "triton_wrong"),
        target="triton",
        trials=1,
        baselines=["eager"],
        atol=atol,
        rtol=atol,
    )
    assert report.verdict == ("fail" if atol is None else "pass")


def test_a_crash_reads_as_a_crash_even_when_the_server_ignores_sigchld(engine):
    """ray.init (with the raylet subreaper option) makes its process ignore SIGCHLD, which children
    inherit and which makes a worker's death by SIGABRT read as "exit code 0". The pool puts the
    default back before each job and in each worker."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None)
    libc.signal(ctypes.c_int(signal.SIGCHLD), ctypes.c_void_p(1))  # SIG_IGN, as Ray's driver has it
    try:
        report = engine.verify(
            problem("fused_bias_gelu"),
            example("fused_bias_gelu", "triton_crash"),
            target="triton",
            trials=1,
            baselines=["eager"],
            timing_budget_s=0.1,
        )
    finally:
        libc.signal(ctypes.c_int(signal.SIGCHLD), ctypes.c_void_p(0))
    assert report.verdict == "error" and "SIGABRT" in report.errors[0], report.errors
