"""What a generation agent gives back: a reply (text, and what it cost in tokens) to a prompt."""

from __future__ import annotations

from collections.abc import Callable


class Reply(str):
    """A generation agent's reply that also says what it cost: ``Reply(text, tokens=prompt + completion)``.

    It is a str, so code that treats replies as text keeps working. The providers return one with
    the SDK's usage counts; MCP sampling reports no usage, so its replies carry an estimate
    (``estimated=True``)."""

    tokens: int | None
    estimated: bool

    def __new__(cls, text: str, tokens: int | None = None, estimated: bool = False) -> Reply:
        self = super().__new__(cls, text)
        self.tokens, self.estimated = tokens, estimated
        return self


def estimate_tokens(*texts: str) -> int:
    """About four characters a token: for replies whose generator reports no usage."""
    return (sum(len(t) for t in texts) + 3) // 4


def reply_text_and_tokens(prompt: str, reply: str) -> tuple[str, int]:
    """A generate's answer as (text, tokens): a Reply's own count, else an estimate over prompt and reply."""
    if not isinstance(reply, str):
        raise TypeError(f"generate must return a str (or a Reply), not {type(reply).__name__}")
    tokens = getattr(reply, "tokens", None)
    return str(reply), tokens if tokens is not None else estimate_tokens(prompt, reply)


# generate(prompt) -> reply: a str, or a Reply (a str subclass) carrying the tokens the request cost;
# for a plain str the loop estimates the tokens as len(prompt + reply) / 4. With candidates_per_round > 1
# it is called from several threads at once, so it must be thread-safe (each call one request).
Generate = Callable[[str], str]
Progress = Callable[[str], None] | None
