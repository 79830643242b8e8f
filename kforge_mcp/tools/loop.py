"""run_loop, loop_start, loop_submit: the KForge generate / repair / optimize loop.

run_loop drives the whole loop server-side; the generation agent is the connected client's own
model, asked through MCP sampling (sampling/createMessage), or an LLM provider configured on the
server. loop_start / loop_submit let a client without sampling drive it: the client's model
answers each prompt and submits the reply; the server checks it, records it and writes the next
prompt with the feedback."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any, Literal

import anyio
from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from pydantic import BaseModel, Field

from kforge_mcp.agents.loop import LoopDriver, LoopResult, Reply, SubmitResult, estimate_tokens
from kforge_mcp.agents.results import LoopOptions
from kforge_mcp.core.errors import KforgeError
from kforge_mcp.core.options import PROBLEM, TARGET_TEXT, Arguments, Baseline, field_of
from kforge_mcp.core.settings import Settings
from kforge_mcp.tools.app_view import TOOL_META
from kforge_mcp.tools.common import App, hints, model_tool, run_tool_job
from kforge_mcp.tools.links import result, run_links

SAMPLING_TIMEOUT_S = 600.0
LOOP = LoopOptions.model_fields


def resumable(name: str) -> Any:
    """A loop option that, left out, is the run's own when resuming one (else its default)."""
    info = LOOP[name]
    bounds = {k: getattr(m, k) for m in info.metadata for k in ("ge", "gt", "le", "lt") if hasattr(m, k)}
    return Field(
        None, description=f"{info.description} (default {info.default}; when resuming, the run's own)", **bounds
    )


class LoopStartCall(Arguments):
    """loop_start: a loop the client's own model drives, one prompt and reply at a time."""

    problem: str = PROBLEM
    target: str = Field(description=TARGET_TEXT)
    max_iterations: int = field_of(LoopOptions, "max_iterations")
    trials: int = field_of(LoopOptions, "trials")
    baselines: list[Baseline] = field_of(LoopOptions, "baselines")
    timing_budget_s: float = field_of(LoopOptions, "timing_budget_s")
    profile: bool = field_of(LoopOptions, "profile")
    stop_at_sol: float | None = field_of(LoopOptions, "stop_at_sol")

    def options(self) -> dict[str, Any]:
        """The loop options given, by LoopOptions' names: those left out stay the run's or the defaults
        (run_loop's max_tokens is per generation: not the loop's)."""
        names = set(LOOP) & set(type(self).model_fields) - {"max_tokens"}
        return {k: v for k, v in self.model_dump(include=names).items() if v is not None}


class RunLoopCall(LoopStartCall):
    """run_loop: the whole loop driven by the server, resumable by run_id."""

    provider: Literal["sampling", "anthropic", "openai"] = Field(
        "sampling",
        description="the generation agent: 'sampling' asks your own model through MCP sampling; 'anthropic' / "
        "'openai' use a provider configured on the server (API key in its environment)",
    )
    run_id: str | None = Field(None, description="resume this run (kforge://runs) instead of starting one")
    max_iterations: int | None = resumable("max_iterations")  # type: ignore[assignment]
    candidates_per_round: int | None = resumable("candidates_per_round")
    max_seconds: float | None = field_of(LoopOptions, "max_seconds")
    token_budget: int | None = field_of(LoopOptions, "max_tokens")
    max_tokens: int = Field(8192, ge=256, le=128000, description="tokens per generation")

    def options(self) -> dict[str, Any]:
        return super().options() | ({"max_tokens": self.token_budget} if self.token_budget else {})


class LoopSubmitCall(Arguments):
    """loop_submit: one attempt of a loop_start run checked."""

    run_id: str = Field(description="the run loop_start began (a unique prefix will do)")
    candidate: str = Field(
        description="your reply to the last prompt (a fenced python block defining ModelNew), the bare code, or a .py path"
    )


class LoopStart(BaseModel):
    run_id: str
    prompt: str = Field(description="give this to your model; submit its reply (or the code) with loop_submit")
    pass_: str = Field("functional", alias="pass", serialization_alias="pass")

    model_config = {"populate_by_name": True}


def driver(app: App) -> LoopDriver:
    if app.loop_driver is None:
        app.loop_driver = LoopDriver(app.engine)
    return app.loop_driver


async def in_thread(fn, *args):
    """``fn(*args)`` on a worker thread, its KforgeError a tool error the model can read."""
    try:
        return await anyio.to_thread.run_sync(fn, *args)
    except KforgeError as e:
        raise ToolError(str(e)) from None


def _text(reply) -> str:
    content = reply.content if isinstance(reply.content, list) else [reply.content]
    return "".join(c.text for c in content if getattr(c, "type", None) == "text")


def sampling_generate(session, loop: asyncio.AbstractEventLoop, max_tokens: int):
    """generate(prompt) -> reply, run on a worker thread, asking the client's model via sampling. Each
    call is its own createMessage request, so several threads may ask at once. Sampling reports no
    token usage: each Reply carries an estimate, len(prompt + reply) / 4."""

    async def sample(prompt: str) -> str:
        with warnings.catch_warnings():  # sampling is deprecated by the 2026-07-28 spec, still the way here
            warnings.simplefilter("ignore")
            answer = await session.create_message(
                [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))],
                max_tokens=max_tokens,
                system_prompt="You write GPU kernels. Follow the output format exactly.",
                include_context="none",
                temperature=None,
            )
        if isinstance(answer, types.ErrorData):
            raise RuntimeError(f"the client refused to sample: {answer.message}")
        return _text(answer)

    def generate(prompt: str) -> Reply:
        text = asyncio.run_coroutine_threadsafe(sample(prompt), loop).result(timeout=SAMPLING_TIMEOUT_S)
        return Reply(text, tokens=estimate_tokens(prompt, text), estimated=True)

    return generate


def generator(call: RunLoopCall, ctx: Context, settings: Settings):
    """The generation agent of a run_loop call: the client's model through sampling, or a server provider."""
    if call.provider != "sampling":
        from kforge_mcp.agents.providers import make_provider

        try:
            return make_provider(call.provider, max_tokens=call.max_tokens, settings=settings)
        except KforgeError as e:
            raise ToolError(str(e)) from None
    caps = ctx.client_capabilities
    if caps is None or caps.sampling is None:
        raise ToolError(
            "this client does not offer MCP sampling, so run_loop cannot ask its model; drive the loop yourself "
            "with loop_start and loop_submit, or pass provider='anthropic' or 'openai' if the server has an API key"
        )
    return sampling_generate(ctx.session, asyncio.get_running_loop(), call.max_tokens)


def register(mcp: MCPServer, app: App) -> None:
    # a new run each call; open world: the attempts come from the client's model (sampling)
    @model_tool(mcp, RunLoopCall, LoopResult, hints(read_only=False, idempotent=False, open_world=True), TOOL_META)
    async def run_loop(call: RunLoopCall, wait_s: float, ctx: Context) -> CallToolResult:
        """Run the KForge loop: a generation agent writes a kernel for the target, repairs it from
        compile errors, crashes and mismatches until it is correct, then optimizes it from the
        profile and the analysis agent's advice; the best correct candidate (by speedup) wins. Every
        attempt is recorded (kforge://runs/{run_id}); the result links an HTML report (report,
        kforge://runs/{run_id}/report). Long runs return a job_id: poll job_result; job_cancel stops
        the run (status 'stopped'), and run_id= resumes it."""
        generate, d, options = generator(call, ctx, app.engine.settings), driver(app), call.options()
        if call.run_id is not None:  # an unknown id is a tool error now (naming the closest ids), not a failed job
            rid = await in_thread(d.store.resolve_id, call.run_id)  # or a unique prefix
            more = {k: options.get(k) for k in ("max_iterations", "candidates_per_round", "max_tokens")}
            work = lambda progress, cancel: d.resume(rid, generate, progress, cancel, **more)  # noqa: E731
        else:
            rid = (await in_thread(d.start, call.problem, call.target, call.provider, options)).id
            work = lambda progress, cancel: d.drive(rid, generate, on_progress=progress, cancel=cancel)  # noqa: E731
        running = lambda job: LoopResult(run_id=rid, status="running", job_id=job.id)  # noqa: E731
        return await run_links(await run_tool_job(app, "run_loop", work, wait_s, ctx, running), app.engine.home)

    # a new run in the store each call
    @model_tool(mcp, LoopStartCall, LoopStart, hints(read_only=False, idempotent=False), TOOL_META, waits=False)
    async def loop_start(call: LoopStartCall, wait_s: float, ctx: Context) -> CallToolResult:
        """Start a loop you drive yourself: returns a run_id and the first prompt. Answer the prompt
        (write the kernel) and pass your reply to loop_submit; repeat with its next_prompt until done."""
        run = await in_thread(driver(app).start, call.problem, call.target, "client", call.options())
        pass_, prompt = await in_thread(driver(app).next_prompt, run.id)
        return result(LoopStart(run_id=run.id, prompt=prompt, pass_=pass_))

    # each call records another attempt
    @model_tool(mcp, LoopSubmitCall, SubmitResult, hints(read_only=False, idempotent=False), TOOL_META)
    async def loop_submit(call: LoopSubmitCall, wait_s: float, ctx: Context) -> CallToolResult:
        """Check one attempt of a loop_start run: compile, verify, and for a correct one profile and
        analyze. Returns the reports, the feedback, the next prompt (with that feedback in it), and
        done when the run is over (best: the best correct candidate so far)."""
        run_id = await in_thread(driver(app).store.resolve_id, call.run_id)  # or a unique prefix
        text = call.candidate
        if "\n" not in text and text.strip().endswith(".py"):
            text = (await in_thread(app.engine.resolve_source, text, "candidate")).text
        work = lambda progress, cancel: driver(app).submit(run_id, text, on_progress=progress, cancel=cancel)  # noqa: E731
        running = lambda job: SubmitResult(run_id=run_id, status="running", job_id=job.id)  # noqa: E731
        return await run_links(await run_tool_job(app, "loop_submit", work, wait_s, ctx, running), app.engine.home)
