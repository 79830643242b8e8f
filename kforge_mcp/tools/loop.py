"""run_loop, loop_start, loop_submit: the KForge generate / repair / optimize loop.

run_loop drives the whole loop server-side; the generation agent is the connected client's own
model, asked through MCP sampling (sampling/createMessage), or an LLM provider configured on the
server. loop_start / loop_submit let a client without sampling drive it: the client's model
answers each prompt and submits the reply; the server checks it, records it and writes the next
prompt with the feedback."""

from __future__ import annotations

import asyncio
import warnings
from typing import Annotated, Literal

import anyio
from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from kforge_mcp.agents.loop import LoopDriver, LoopResult, Reply, SubmitResult, estimate_tokens
from kforge_mcp.core.errors import KforgeError
from kforge_mcp.core.options import VERIFY, Baselines, Trials
from kforge_mcp.tools.app_view import TOOL_META
from kforge_mcp.tools.common import DEFAULT_WAIT_S, App, hints, run_tool_job, target_field, target_names
from kforge_mcp.tools.links import run_links

SAMPLING_TIMEOUT_S = 600.0


class LoopStart(BaseModel):
    run_id: str
    prompt: str = Field(description="give this to your model; submit its reply (or the code) with loop_submit")
    pass_: str = Field("functional", alias="pass", serialization_alias="pass")

    model_config = {"populate_by_name": True}


def driver(app: App) -> LoopDriver:
    d = getattr(app, "loop_driver", None)
    if d is None:
        d = app.loop_driver = LoopDriver(app.engine)
    return d


def _text(result) -> str:
    content = result.content if isinstance(result.content, list) else [result.content]
    return "".join(c.text for c in content if getattr(c, "type", None) == "text")


def sampling_generate(session, loop: asyncio.AbstractEventLoop, max_tokens: int):
    """generate(prompt) -> reply, run on a worker thread, asking the client's model via sampling. Each
    call is its own createMessage request, so several threads may ask at once. Sampling reports no
    token usage: each Reply carries an estimate, len(prompt + reply) / 4."""

    async def sample(prompt: str) -> str:
        with warnings.catch_warnings():  # sampling is deprecated by the 2026-07-28 spec, still the way here
            warnings.simplefilter("ignore")
            result = await session.create_message(
                [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))],
                max_tokens=max_tokens,
                system_prompt="You write GPU kernels. Follow the output format exactly.",
                include_context="none",
                temperature=None,
            )
        if isinstance(result, types.ErrorData):
            raise RuntimeError(f"the client refused to sample: {result.message}")
        return _text(result)

    def generate(prompt: str) -> Reply:
        text = asyncio.run_coroutine_threadsafe(sample(prompt), loop).result(timeout=SAMPLING_TIMEOUT_S)
        return Reply(text, tokens=estimate_tokens(prompt, text), estimated=True)

    return generate


def _options(**kw) -> dict:
    return {k: v for k, v in kw.items() if v is not None}


def register(mcp: MCPServer, app: App) -> None:
    async def start(problem, target, provider, options) -> str:
        try:
            run = await anyio.to_thread.run_sync(lambda: driver(app).start(problem, target, provider, options))
        except KforgeError as e:
            raise ToolError(str(e)) from None
        return run.id

    # a new run each call; open world: the attempts come from the client's model (sampling)
    @mcp.tool(annotations=hints(read_only=False, idempotent=False, open_world=True), meta=TOOL_META)
    async def run_loop(
        problem: Annotated[str, Field(description="reference in KernelBench form: text or a .py path")],
        target: Annotated[str, target_field(f"{target_names()} (with prompt templates: see prompts/)")],
        ctx: Context,
        provider: Annotated[
            Literal["sampling", "anthropic", "openai"],
            Field(
                description="the generation agent: 'sampling' asks your own model through MCP sampling; 'anthropic' / "
                "'openai' use a provider configured on the server (API key in its environment)"
            ),
        ] = "sampling",
        max_iterations: Annotated[
            int | None,
            Field(ge=1, le=200, description="attempts in all (default 8; when resuming, the run's own unless given)"),
        ] = None,
        wait_s: Annotated[float, Field(ge=0, description="return a job_id if not done by then")] = DEFAULT_WAIT_S,
        max_seconds: Annotated[float | None, Field(gt=0, description="wall-time budget of the run")] = None,
        stop_at_sol: Annotated[float | None, Field(gt=0, description="stop at this fraction of speed of light")] = 0.9,
        trials: Trials = VERIFY.trials,
        baselines: Annotated[Baselines, Field(description="baselines to time")] = VERIFY.baselines,
        timing_budget_s: Annotated[float, Field(gt=0, le=60)] = VERIFY.timing_budget_s,
        profile: Annotated[bool, Field(description="profile correct candidates and feed advice back")] = True,
        max_tokens: Annotated[int, Field(ge=256, le=128000, description="per generation")] = 8192,
        run_id: Annotated[
            str | None,
            Field(
                description="resume this run (from kforge://runs) instead of starting one; recorded attempts are kept"
            ),
        ] = None,
        candidates_per_round: Annotated[
            int | None,
            Field(
                ge=1,
                le=16,
                description=(
                    "replies asked for the same prompt each round, concurrently (separate sampling requests), checked side "
                    "by side as the server's executor allows; each counts as an attempt; the round's best drives the next "
                    "prompt (default 1)"
                ),
            ),
        ] = None,
        token_budget: Annotated[
            int | None,
            Field(
                ge=1,
                description=(
                    "stop the run (stop_reason 'max_tokens') once its attempts have cost this many tokens, prompt + "
                    "completion; sampling reports no usage, so there it is estimated as len(prompt + reply) / 4"
                ),
            ),
        ] = None,
    ) -> LoopResult:
        """Run the KForge loop: a generation agent writes a kernel for the target, repairs it from
        compile errors, crashes and mismatches until it is correct, then optimizes it from the
        profile and the analysis agent's advice; the best correct candidate (by speedup) wins. Every
        attempt is recorded (kforge://runs/{run_id}); the result links an HTML report (report,
        kforge://runs/{run_id}/report). Long runs return a job_id: poll job_result; job_cancel stops
        the run (status 'stopped'), and run_id= resumes it."""
        if provider == "sampling":
            caps = ctx.client_capabilities
            if caps is None or caps.sampling is None:
                raise ToolError(
                    "this client does not offer MCP sampling, so run_loop cannot ask its model; drive the "
                    "loop yourself with loop_start and loop_submit, or pass provider='anthropic' or "
                    "'openai' if the server has an API key"
                )
            generate = sampling_generate(ctx.session, asyncio.get_running_loop(), max_tokens)
        else:
            from kforge_mcp.agents.providers import make_provider

            try:
                generate = make_provider(provider, max_tokens=max_tokens)
            except KforgeError as e:
                raise ToolError(str(e)) from None
        d = driver(app)
        if run_id is not None:
            try:  # an unknown id is a tool error now (naming the closest ids), not a failed job later
                run_id = await anyio.to_thread.run_sync(d.store.resolve_id, run_id)  # or a unique prefix
            except KforgeError as e:
                raise ToolError(str(e)) from None
        if run_id is None:
            opts = _options(
                max_iterations=max_iterations,
                max_seconds=max_seconds,
                stop_at_sol=stop_at_sol,
                trials=trials,
                baselines=baselines,
                timing_budget_s=timing_budget_s,
                profile=profile,
                candidates_per_round=candidates_per_round,
                max_tokens=token_budget,
            )
            rid = await start(problem, target, provider, opts)

            def work(progress, cancel):
                return d.drive(rid, generate, on_progress=progress, cancel=cancel)
        else:
            rid = run_id

            def work(progress, cancel):
                return d.resume(
                    rid,
                    generate,
                    on_progress=progress,
                    cancel=cancel,
                    max_iterations=max_iterations,
                    candidates_per_round=candidates_per_round,
                    max_tokens=token_budget,
                )

        # annotated with the output schema: the SDK passes the CallToolResult through
        return await run_links(  # type: ignore[return-value]
            await run_tool_job(
                app, "run_loop", work, wait_s, ctx, lambda job: LoopResult(run_id=rid, status="running", job_id=job.id)
            ),
            app.engine.home,
        )

    # a new run in the store each call
    @mcp.tool(annotations=hints(read_only=False, idempotent=False), meta=TOOL_META)
    async def loop_start(
        problem: Annotated[str, Field(description="reference in KernelBench form: text or a .py path")],
        target: Annotated[str, target_field()],
        max_iterations: Annotated[int, Field(ge=1, le=200, description="attempts in all")] = 8,
        trials: Trials = VERIFY.trials,
        baselines: Annotated[Baselines, Field(description="baselines to time")] = VERIFY.baselines,
        timing_budget_s: Annotated[float, Field(gt=0, le=60)] = VERIFY.timing_budget_s,
        profile: Annotated[bool, Field(description="profile correct candidates and feed advice back")] = True,
        stop_at_sol: Annotated[float | None, Field(gt=0, description="stop at this fraction of speed of light")] = 0.9,
    ) -> LoopStart:
        """Start a loop you drive yourself: returns a run_id and the first prompt. Answer the prompt
        (write the kernel) and pass your reply to loop_submit; repeat with its next_prompt until done."""
        opts = _options(
            max_iterations=max_iterations,
            trials=trials,
            baselines=baselines,
            timing_budget_s=timing_budget_s,
            profile=profile,
            stop_at_sol=stop_at_sol,
        )
        rid = await start(problem, target, "client", opts)
        pass_, prompt = await anyio.to_thread.run_sync(lambda: driver(app).next_prompt(rid))
        return LoopStart(run_id=rid, prompt=prompt, pass_=pass_)

    # each call records another attempt
    @mcp.tool(annotations=hints(read_only=False, idempotent=False), meta=TOOL_META)
    async def loop_submit(
        run_id: str,
        candidate: Annotated[
            str,
            Field(
                description="your reply to the last prompt (a fenced python block defining "
                "ModelNew), the bare code, or a .py path"
            ),
        ],
        ctx: Context,
        wait_s: Annotated[float, Field(ge=0, description="return a job_id if not done by then")] = DEFAULT_WAIT_S,
    ) -> SubmitResult:
        """Check one attempt of a loop_start run: compile, verify, and for a correct one profile and
        analyze. Returns the reports, the feedback, the next prompt (with that feedback in it), and
        done when the run is over (best: the best correct candidate so far)."""
        try:
            run_id = await anyio.to_thread.run_sync(driver(app).store.resolve_id, run_id)  # or a unique prefix
        except KforgeError as e:
            raise ToolError(str(e)) from None
        text = candidate
        if "\n" not in candidate and candidate.strip().endswith(".py"):
            from kforge_mcp.agents.loop import resolve

            try:
                text = resolve(app.engine, candidate, "candidate").text
            except KforgeError as e:
                raise ToolError(str(e)) from None

        def work(progress, cancel):
            return driver(app).submit(run_id, text, on_progress=progress, cancel=cancel)

        result = await run_tool_job(
            app,
            "loop_submit",
            work,
            wait_s,
            ctx,
            lambda job: SubmitResult(run_id=run_id, status="running", job_id=job.id),
        )
        # annotated with the output schema: the SDK passes the CallToolResult through
        return await run_links(result, app.engine.home)  # type: ignore[return-value]
