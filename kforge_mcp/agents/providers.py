"""LLM providers for the headless loop: ``make_provider(name) -> generate(prompt) -> reply``.

The official ``anthropic`` and ``openai`` SDKs (``pip install 'kforge-mcp[llm]'``). API keys come
from the environment (ANTHROPIC_API_KEY, OPENAI_API_KEY) and are handed to the SDK only: never
logged, stored in the run store, or put in an error message. ``base_url`` points either SDK at a
compatible endpoint (a proxy, vLLM, a local server)."""

from __future__ import annotations

import os
from typing import Callable

from ..errors import InputError

PROVIDERS = ("anthropic", "openai")
KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
DEFAULT_MODEL = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4.1"}
SYSTEM = "You write GPU kernels. Follow the output format exactly."


def make_provider(name: str, model: str | None = None, base_url: str | None = None, max_tokens: int = 8192,
                  temperature: float | None = None) -> Callable[[str], str]:  # fmt: skip
    if name not in PROVIDERS:
        raise InputError(f"unknown provider '{name}'; choose from {', '.join(PROVIDERS)}")
    key = os.environ.get(KEY_ENV[name])
    if not key and not (name == "openai" and base_url):  # a local OpenAI-compatible server may need no key
        raise InputError(f"provider '{name}' needs {KEY_ENV[name]} in the environment")
    model = model or os.environ.get("KFORGE_MODEL") or DEFAULT_MODEL[name]
    base_url = base_url or os.environ.get(f"{name.upper()}_BASE_URL") or None
    extra = {} if temperature is None else {"temperature": temperature}
    try:
        if name == "anthropic":
            import anthropic

            client = anthropic.Anthropic(api_key=key, base_url=base_url)

            def generate(prompt: str) -> str:
                msg = client.messages.create(model=model, max_tokens=max_tokens, system=SYSTEM,
                                             messages=[{"role": "user", "content": prompt}], **extra)  # fmt: skip
                return "".join(b.text for b in msg.content if getattr(b, "type", None) == "text")
        else:
            import openai

            client = openai.OpenAI(api_key=key or "none", base_url=base_url)

            def generate(prompt: str) -> str:
                resp = client.chat.completions.create(model=model, max_completion_tokens=max_tokens,
                                                      messages=[{"role": "system", "content": SYSTEM},
                                                                {"role": "user", "content": prompt}], **extra)  # fmt: skip
                return resp.choices[0].message.content or ""
    except ImportError:
        raise InputError(f"provider '{name}' needs the '{name}' package: pip install 'kforge-mcp[llm]'") from None
    generate.provider, generate.model = name, model  # type: ignore[attr-defined]
    return generate
