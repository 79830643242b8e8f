"""LLM providers (with stand-in SDK modules: no network), the CLI's run-loop, and the library entry."""

from __future__ import annotations

import sys
import types

import pytest
from loop_replies import PROBLEM, REPLIES

import kforge_mcp
from kforge_mcp.agents.providers import make_provider
from kforge_mcp.cli import build_parser, run
from kforge_mcp.errors import InputError

SECRET = "sk-test-never-shown-0123456789"


def fake_sdk(monkeypatch, name, calls):
    mod = types.ModuleType(name)

    class Client:
        def __init__(self, api_key=None, base_url=None):
            calls.append(("client", api_key, base_url))
            if name == "anthropic":
                self.messages = types.SimpleNamespace(create=self.create)
            else:
                self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=self.create))

        def create(self, **kw):
            calls.append(("create", kw))
            if name == "anthropic":
                return types.SimpleNamespace(content=[types.SimpleNamespace(type="text", text="reply from claude")])
            msg = types.SimpleNamespace(content="reply from gpt")
            return types.SimpleNamespace(choices=[types.SimpleNamespace(message=msg)])

    setattr(mod, "Anthropic" if name == "anthropic" else "OpenAI", Client)
    monkeypatch.setitem(sys.modules, name, mod)


@pytest.mark.parametrize("name, env, text", [("anthropic", "ANTHROPIC_API_KEY", "reply from claude"),
                                             ("openai", "OPENAI_API_KEY", "reply from gpt")])  # fmt: skip
def test_providers_call_the_official_sdks_with_the_key_from_the_environment(monkeypatch, name, env, text):
    calls = []
    fake_sdk(monkeypatch, name, calls)
    monkeypatch.setenv(env, SECRET)
    generate = make_provider(name, model="m1", base_url="http://localhost:9/v1")
    assert generate("write a kernel") == text
    assert calls[0] == ("client", SECRET, "http://localhost:9/v1")
    kw = calls[1][1]
    assert kw["model"] == "m1" and kw["messages"][-1]["content"] == "write a kernel"


def test_missing_key_or_unknown_provider_is_an_input_error_without_secrets(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(InputError, match="needs ANTHROPIC_API_KEY"):
        make_provider("anthropic")
    with pytest.raises(InputError, match="unknown provider"):
        make_provider("gemini")


def test_cli_run_loop_without_a_key_fails_as_bad_input(monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    args = build_parser().parse_args(["run-loop", PROBLEM, "--target", "triton", "--provider", "openai"])
    assert run(args) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err


def test_library_run_loop_stops_once_correct_when_not_optimizing(engine):
    prompts = []

    def generate(prompt):
        prompts.append(prompt)
        return REPLIES[2]

    result = kforge_mcp.run_loop(PROBLEM, "triton", generate, engine=engine, max_iterations=3, optimize=False,
                                 trials=1, baselines=["eager"], timing_budget_s=0.2)  # fmt: skip
    assert len(prompts) == 1 and result.stop_reason == "correct" and result.best.index == 0
