"""LLM providers for the headless loop: ``make_provider(name) -> generate(prompt) -> reply``.

The official ``anthropic`` (2.x: Messages API) and ``openai`` (Chat Completions) SDKs
(``pip install 'kforge-mcp[llm]'``). API keys come from the environment (ANTHROPIC_API_KEY,
OPENAI_API_KEY) and are handed to the SDK only: never logged, stored in the run store, or put in
an error message. ``base_url`` (or ANTHROPIC_BASE_URL / OPENAI_BASE_URL) points either SDK at a
compatible endpoint (a proxy, vLLM, a local server). An endpoint's refusal (401, 429, 500, ...) or an
unreachable endpoint raises ProviderError with the status and the endpoint's own message; the loop
records it as the run's stop reason.

A reply is a ``Reply`` (a str) whose ``tokens`` is the request's prompt + completion tokens from the
SDK's ``usage`` (Anthropic ``input_tokens + output_tokens``, OpenAI ``prompt_tokens +
completion_tokens``); None when the endpoint reports no usage (the loop then estimates). The
client is thread-safe, so the loop may ask for several replies at once."""

from __future__ import annotations

from typing import Any, Protocol, cast

from kforge_mcp.agents.reply import Reply
from kforge_mcp.core.errors import InputError, KforgeError
from kforge_mcp.core.settings import Settings

PROVIDERS = ("anthropic", "openai")
KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
DEFAULT_MODEL = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4.1"}  # the SDK warns on deprecated ones
SYSTEM = "You write GPU kernels. Follow the output format exactly."


class ProviderError(KforgeError):
    """The LLM endpoint refused or could not be reached."""


def _error_text(body, fallback: str) -> str:
    # Anthropic: {"type": "error", "error": {"type", "message"}}; OpenAI: {"error": {"message", ...}} (the SDK
    # hands over the inner dict); anything else: the SDK's own message
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            kind = inner.get("type") or inner.get("code")
            return f"{kind}: {inner['message']}" if kind else str(inner["message"])
    return fallback


def _wrap(sdk, name: str, where: str, key: str | None):
    """Turn the SDK's errors into a ProviderError that says what happened, without the key."""

    def scrub(text: str) -> str:
        return text.replace(key, "***") if key else text

    def convert(e: Exception) -> ProviderError:
        if isinstance(e, sdk.APIStatusError):
            detail = _error_text(getattr(e, "body", None), str(e))
            return ProviderError(scrub(f"{name} endpoint {where} answered HTTP {e.status_code}: {detail}"))
        if isinstance(e, sdk.APIConnectionError):  # includes timeouts
            return ProviderError(scrub(f"could not reach the {name} endpoint {where}: {e}"))
        return ProviderError(scrub(f"{name} request failed: {type(e).__name__}: {e}"))

    return convert


def _tokens(response, prompt_field: str, completion_field: str) -> int | None:
    """Prompt + completion tokens from an SDK response's ``usage``; None when it has none."""
    usage = getattr(response, "usage", None)
    counts: list[Any] = [getattr(usage, f, None) for f in (prompt_field, completion_field)]
    return sum(counts) if all(isinstance(c, int) for c in counts) else None


class Provider(Protocol):
    """What make_provider returns: ``generate(prompt) -> Reply``, naming its provider and model."""

    provider: str
    model: str

    def __call__(self, prompt: str) -> Reply: ...


def make_provider(
    name: str,
    model: str | None = None,
    base_url: str | None = None,
    max_tokens: int = 8192,
    temperature: float | None = None,
    max_retries: int = 2,
    timeout_s: float = 600.0,
    *,
    settings: Settings,
) -> Provider:
    """``settings``: the caller's (its model, keys and base URLs)."""
    if name not in PROVIDERS:
        raise InputError(f"unknown provider '{name}'; choose from {', '.join(PROVIDERS)}")
    key = settings.api_key(name)
    if not key and not (name == "openai" and base_url):  # a local OpenAI-compatible server may need no key
        raise InputError(f"provider '{name}' needs {KEY_ENV[name]} in the environment")
    model = model or settings.model or DEFAULT_MODEL[name]
    base_url = base_url or getattr(settings, f"{name}_base_url") or None
    where = base_url or "(the SDK's default)"
    extra = {} if temperature is None else {"temperature": temperature}
    try:
        sdk = __import__(name)
    except ImportError:
        raise InputError(f"provider '{name}' needs the '{name}' package: pip install 'kforge-mcp[llm]'") from None
    convert = _wrap(sdk, name, where, key)
    if name == "anthropic":
        client = sdk.Anthropic(api_key=key, base_url=base_url, max_retries=max_retries, timeout=timeout_s)

        def call(prompt: str) -> Reply:
            msg = client.messages.create(
                model=model,
                max_tokens=max_tokens,
                system=SYSTEM,
                messages=[{"role": "user", "content": prompt}],
                **extra,
            )
            text = "".join(b.text for b in msg.content if getattr(b, "type", None) == "text")
            return Reply(text, tokens=_tokens(msg, "input_tokens", "output_tokens"))
    else:
        client = sdk.OpenAI(api_key=key or "none", base_url=base_url, max_retries=max_retries, timeout=timeout_s)

        def call(prompt: str) -> Reply:
            resp = client.chat.completions.create(
                model=model,
                max_completion_tokens=max_tokens,
                messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
                **extra,
            )
            if not resp.choices:
                raise ProviderError(f"openai endpoint {where} returned no choices")
            text = resp.choices[0].message.content or ""
            return Reply(text, tokens=_tokens(resp, "prompt_tokens", "completion_tokens"))

    def generate(prompt: str) -> Reply:
        try:
            return call(prompt)
        except ProviderError:
            raise
        except sdk.APIError as e:
            raise convert(e) from None

    generate.provider, generate.model = name, model  # type: ignore[attr-defined]
    return cast(Provider, generate)  # with the two attributes just set
