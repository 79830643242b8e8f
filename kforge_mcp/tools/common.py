"""What every tool shares: the engine, the job table, tools made from their argument models, and running
work under a wait budget with progress notifications."""

from __future__ import annotations

import copy
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field, JsonValue
from pydantic.fields import FieldInfo

from kforge_mcp.api import Engine
from kforge_mcp.core.errors import KforgeError
from kforge_mcp.runtime.jobs import Job, JobManager, raise_job_error
from kforge_mcp.targets import TARGETS

if TYPE_CHECKING:
    from kforge_mcp.agents.loop import LoopDriver

logger = logging.getLogger("kforge_mcp.server")
Report = TypeVar("Report", bound=BaseModel)

# Claude Desktop and the TypeScript SDK cut a call off at about 60 s: answer before that.
DEFAULT_WAIT_S = 50.0
HEARTBEAT_S = 5.0  # progress at least this often, so hosts see the call is alive
# the MCP task a tools/call runs as (tools/tasks.py), if any: run_tool_job gives it its job
TASK_RUN: ContextVar[Any] = ContextVar("kforge_task_run", default=None)


def hints(read_only: bool, idempotent: bool = True, destructive: bool = False, open_world: bool = False):
    """MCP tool annotations, for hosts that choose which calls to confirm with the user. Closed
    world unless said: the tools act on this machine (or its own Ray cluster), not the internet."""
    return ToolAnnotations(
        read_only_hint=read_only, destructive_hint=destructive, idempotent_hint=idempotent, open_world_hint=open_world
    )


def target_field(description: str, optional: bool = False):
    """``target`` is a closed set: the targets found at start, as an enum hosts can offer. Pydantic
    still takes any string, so an unknown one gets the engine's error naming the known ones."""
    names: list[JsonValue] = list(TARGETS) + ([None] if optional else [])
    return Field(description=description, json_schema_extra={"enum": names})


Call = TypeVar("Call", bound=BaseModel)
KEYWORD = inspect.Parameter.KEYWORD_ONLY
WAIT_S = Annotated[float, Field(ge=0, description="return a job_id if not done by then")]


def model_tool(
    mcp: MCPServer,
    model: type[Call],
    report: type[BaseModel],
    annotations: ToolAnnotations,
    meta: dict[str, Any] | None = None,
    waits: bool = True,
    described: dict[str, str] | None = None,
) -> Callable[[Callable[[Call, float, Context], Awaitable[CallToolResult]]], None]:
    """Register ``fn(call, wait_s, ctx)`` as the MCP tool of its name whose arguments are ``model``'s fields (and
    ``wait_s`` when it ``waits``), and whose structured result is a ``report``. The SDK builds its input schema
    from the model's own descriptions, bounds and defaults, and validates a call against them once; ``fn`` gets
    the model. ``described``: a field's description where only a floor above core can write it (the formats or
    profilers the platforms found)."""

    def register(fn: Callable[[Call, float, Context], Awaitable[CallToolResult]]) -> None:
        own = list(vars(model).get("__annotations__", {}))  # the tool's own fields first, then the shared ones
        names = own + [n for n in model.model_fields if n not in own]
        params = [argument(name, model.model_fields[name], (described or {}).get(name)) for name in names]
        if waits:
            params.append(inspect.Parameter("wait_s", KEYWORD, default=DEFAULT_WAIT_S, annotation=WAIT_S))
        params.append(inspect.Parameter("ctx", KEYWORD, annotation=Context))
        returns = Annotated[CallToolResult, report]

        async def tool(ctx: Context, wait_s: float = DEFAULT_WAIT_S, **arguments: Any) -> CallToolResult:
            return await fn(model.model_construct(**arguments), wait_s, ctx)  # validated already, by the SDK

        tool.__name__, tool.__doc__ = fn.__name__, fn.__doc__
        tool.__signature__ = inspect.Signature(params, return_annotation=returns)  # type: ignore[attr-defined]
        tool.__annotations__ = {p.name: p.annotation for p in params} | {"return": returns}
        mcp.tool(annotations=annotations, meta=meta)(tool)

    return register


def argument(name: str, info: FieldInfo, description: str | None = None) -> inspect.Parameter:
    """A model's field as a tool function's keyword argument: its type, and as its default the field itself
    (bounds, default, description), which the SDK's argument model takes as it is; ``target`` also lists the
    registered targets."""
    if name == "target" or description:
        info = copy.copy(info)
        info.json_schema_extra = {"enum": list(TARGETS)} if name == "target" else info.json_schema_extra
        info.description = description or info.description
    return inspect.Parameter(name, KEYWORD, default=info, annotation=info.annotation)


# reports only: compile builds in a sandboxed worker and changes nothing the user sees but caches
READ_ONLY = hints(read_only=True)
# runs the submitted code on the device (sandboxed): not read-only, though it destroys nothing
RUNS_CODE = hints(read_only=False)


def invalid_params(message: str) -> MCPError:
    """A name the client got wrong is invalid params (-32602), not a server fault: one line at
    WARNING, no traceback (the SDK answers an unknown prompt as an internal error)."""
    logger.warning("%s", message)
    return MCPError(code=INVALID_PARAMS, message=message)


@dataclass
class App:
    engine: Engine
    jobs: JobManager = field(default_factory=JobManager)
    bus: Any = None  # the server's subscriptions/listen bus (run_watch.ListenerCount)
    background: list[Callable[[], Awaitable[None]]] = field(default_factory=list)  # tasks for the server's life
    loop_driver: LoopDriver | None = None  # made on first use (tools/loop.py)

    @asynccontextmanager
    async def lifespan(self, _server):
        """The server's lifespan (once per stdio process or HTTP app): the background tasks run in it."""
        async with anyio.create_task_group() as tg:
            for task in self.background:
                tg.start_soon(task)
            yield {"task_group": tg}  # tasks (tools/tasks.py) run their calls in it
            tg.cancel_scope.cancel()


async def wait_for(job: Job, wait_s: float, ctx: Context | None, quiet: anyio.Event | None = None) -> bool:
    """Wait up to ``wait_s`` for a job, forwarding its progress. True when it finished.
    Progress is only ever sent before the result (or the task handle: ``quiet``), never after."""
    started = time.monotonic()
    last_sent, sent, last_value = 0.0, 0, 0.0
    # progress is seconds waited out of wait_s (the call answers by then: a result or a job id).
    # The spec wants each value above the last; several lines in one poll share a clock reading.
    total = wait_s if wait_s > 0 else None

    async def report(message: str) -> None:
        nonlocal last_value
        if quiet is not None and quiet.is_set():
            return
        last_value = max(round(time.monotonic() - started, 3), round(last_value + 0.001, 3))
        try:
            assert ctx is not None  # report runs only with a ctx (below)
            await ctx.report_progress(last_value, total, message)
        except Exception:  # noqa: BLE001  (a client that dropped progress must not fail the call)
            pass

    while True:
        finished = job.done.is_set()
        elapsed = time.monotonic() - started
        if ctx is not None:
            new = job.progress_log[sent:]  # every line in order, however fast the job wrote them
            sent += len(new)
            for message in new:
                await report(message)
            if new:
                last_sent = elapsed
            elif not finished and elapsed - last_sent >= HEARTBEAT_S:
                await report(job.progress or job.status)
                last_sent = elapsed
        if finished:
            return True
        if elapsed >= wait_s:
            return False
        await anyio.sleep(0.01)  # a cache hit should not wait out a long poll


async def run_tool_job(
    app: App,
    tool: str,
    work: Callable[..., Report],
    wait_s: float,
    ctx: Context | None,
    running: Callable[[Job], Report],
) -> Report:
    """Run ``work(progress, cancel)`` as a job; return its result, or ``running(job)`` when
    it outlives ``wait_s``. Input errors become tool errors the model can read."""
    if wait_s < 0:
        raise ToolError("wait_s must be >= 0")
    job = app.jobs.submit(tool, work)
    task = TASK_RUN.get()
    if task is not None:  # a task: the call runs to its end, with progress while the caller still waits
        task.attach(job)
        if not await wait_for(job, wait_s, ctx, quiet=task.detached):
            await wait_for(job, math.inf, None)
    elif not await wait_for(job, wait_s, ctx):
        return running(job)
    return cast(Report, job_result_or_raise(job))  # what work returned


def job_result_or_raise(job: Job) -> BaseModel:
    try:
        raise_job_error(job)
    except KforgeError as e:
        raise ToolError(str(e)) from None
    assert job.result is not None  # a job that finished without an error holds its result
    return job.result
