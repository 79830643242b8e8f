"""LLM providers: the official anthropic and openai SDKs against a local endpoint that speaks their
wire formats (tests/llm_server.py), the loop driven by them, their errors, and the CLI's run-loop."""

from __future__ import annotations

import logging
import socket

import pytest
from llm_server import LLMServer
from loop_replies import PROBLEM, REPLIES

import kforge_mcp
from kforge_mcp.agents.providers import SYSTEM, ProviderError, make_provider
from kforge_mcp.cli import build_parser, read_settings, run
from kforge_mcp.core.errors import InputError
from kforge_mcp.core.settings import Settings
from kforge_mcp.store import RunStore

SECRET = "sk-test-never-shown-0123456789"
KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
PATH = {"anthropic": "/v1/messages", "openai": "/v1/chat/completions"}


def base_url(name: str, server: LLMServer) -> str:
    return server.url if name == "anthropic" else server.url + "/v1"  # each SDK's own convention


def auth(request) -> str:
    h = request["headers"]
    return h.get("x-api-key") or h.get("authorization", "")


@pytest.mark.parametrize("name", ["anthropic", "openai"])
def test_the_sdk_sends_the_prompt_model_limits_and_key_in_its_wire_format(monkeypatch, caplog, name):
    monkeypatch.setenv(KEY_ENV[name], SECRET)
    caplog.set_level(logging.DEBUG)  # whatever the SDKs and httpx log, the key must not be in it
    with LLMServer(replies=[f"reply from {name}"]) as server:
        generate = make_provider(
            name, model="model-x", base_url=base_url(name, server), max_tokens=1234, settings=Settings.read()
        )
        reply = generate("write a kernel")
    assert reply == f"reply from {name}" and reply.tokens == 30  # the SDK's usage: 10 prompt + 20 completion
    (req,) = server.requests
    body = req["body"]
    assert req["path"] == PATH[name] and body["model"] == "model-x"
    assert body["messages"][-1] == {"role": "user", "content": "write a kernel"}
    if name == "anthropic":
        assert body["max_tokens"] == 1234 and body["system"] == SYSTEM
    else:
        assert body["max_completion_tokens"] == 1234 and body["messages"][0] == {"role": "system", "content": SYSTEM}
    assert SECRET in auth(req)  # the key reached the endpoint ...
    assert caplog.records and SECRET not in caplog.text  # ... and nowhere else


@pytest.mark.parametrize("name", ["anthropic", "openai"])
@pytest.mark.parametrize("status, words", [(401, "invalid x-api-key"), (500, "Internal server error")])
def test_an_endpoint_error_is_a_clear_provider_error(monkeypatch, name, status, words):
    monkeypatch.setenv(KEY_ENV[name], SECRET)
    with LLMServer(status=status) as server:
        generate = make_provider(name, base_url=base_url(name, server), max_retries=1, settings=Settings.read())
        with pytest.raises(ProviderError) as info:
            generate("write a kernel")
    message = str(info.value)
    assert f"{name} endpoint {base_url(name, server)} answered HTTP {status}" in message and words in message
    assert SECRET not in message
    assert len(server.requests) == (1 if status == 401 else 2)  # the SDK retries a 500, never a 401


def test_an_unreachable_endpoint_is_a_provider_error(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    generate = make_provider(
        "openai", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout_s=5, settings=Settings.read()
    )
    with pytest.raises(ProviderError, match=f"could not reach the openai endpoint http://127.0.0.1:{port}/v1"):
        generate("write a kernel")


def test_missing_key_or_unknown_provider_is_an_input_error_without_secrets(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(InputError, match="needs ANTHROPIC_API_KEY"):
        make_provider("anthropic", settings=Settings.read())
    with pytest.raises(InputError, match="unknown provider"):
        make_provider("gemini", settings=Settings.read())


def test_cli_run_loop_without_a_key_fails_as_bad_input(monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    args = build_parser().parse_args(["run-loop", PROBLEM, "--target", "triton", "--provider", "openai"])
    assert run(args, read_settings()) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err


def test_the_loop_uses_the_providers_replies_and_never_stores_the_key(engine, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    monkeypatch.setenv("KFORGE_MODEL", "claude-test")
    with LLMServer(replies=[REPLIES[0], REPLIES[2]]) as server:  # a syntax error, then the right kernel
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        result = kforge_mcp.run_loop(
            PROBLEM,
            "triton",
            provider="anthropic",
            engine=engine,
            max_iterations=3,
            optimize=False,
            trials=1,
            baselines=["eager"],
            timing_budget_s=0.2,
        )
    assert [a.verdict for a in result.attempts] == ["compile_error", "pass"] and result.stop_reason == "correct"
    assert result.best.index == 1 and "class ModelNew" in result.best.candidate
    store = RunStore.for_home(engine.home)
    assert server.prompts() == [a.prompt for a in store.attempts(result.run_id)]  # what was asked is what was kept
    assert "did not compile" in server.prompts()[1]
    assert all(r["body"]["model"] == "claude-test" and SECRET in auth(r) for r in server.requests)
    assert store.get_run(result.run_id).provider == "anthropic"
    assert [a.tokens for a in store.attempts(result.run_id)] == [30, 30] and result.tokens == 60  # as reported
    stored = b"".join(p.read_bytes() for p in engine.home.glob("runs.db*"))
    assert SECRET.encode() not in stored and b"did not compile" in stored


def test_a_refusing_endpoint_fails_the_run_with_the_reason(engine, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with LLMServer(status=401) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        result = kforge_mcp.run_loop(PROBLEM, "triton", provider="openai", engine=engine)
    assert result.status == "failed" and result.attempts == [] and result.best is None
    assert "generation failed: ProviderError" in result.stop_reason and "HTTP 401" in result.stop_reason
    assert "invalid x-api-key" in result.stop_reason and SECRET not in result.stop_reason
