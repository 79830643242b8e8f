"""Tasks for long calls: verify, verify_batch, profile, bench and run_loop run as MCP tasks for the
clients that negotiate them, in both protocol versions the server speaks.

- 2025-11-25 (the tasks utility): the server declares ``capabilities.tasks`` and each of these tools
  ``execution.taskSupport: optional``; a ``tools/call`` carrying ``task`` answers at once with
  ``CreateTaskResult``; then tasks/get, tasks/result (blocks until the end, returns the call's own
  result), tasks/list, tasks/cancel, and ``notifications/tasks/status`` when a task ends.
- 2026-07-28 (the Tasks extension, ``io.modelcontextprotocol/tasks``): a client that declares the
  extension on its call gets the result as usual when it comes within ``wait_s``, else a task
  (``resultType: task``); tasks/get carries the result once it is done; tasks/update, tasks/cancel.
  Status comes by polling: the SDK's ``subscriptions/listen`` has no task filter to push it on.

A task is its call's job: the task id is the job id (tools/common.py run_tool_job names the task
after the job), so job_status, job_result and job_cancel follow it too, for clients without tasks.
The call itself runs to its end in the background, through the SDK's own tools/call handling, so
its result is exactly what the plain call would have returned."""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
from mcp.server.mcpserver import Extension, MethodBinding, require_client_extension
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CancelTaskRequestParams,
    ErrorData,
    GetTaskPayloadRequestParams,
    GetTaskRequestParams,
    PaginatedRequestParams,
    RequestParams,
    TaskStatusNotification,
    TaskStatusNotificationParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from kforge_mcp.runtime.jobs import MAX_KEPT_JOBS, Job
from kforge_mcp.tools.common import DEFAULT_WAIT_S, TASK_RUN, App, logger

IDENTIFIER = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
IMMEDIATE_RESPONSE = "io.modelcontextprotocol/model-immediate-response"
TASKS_VERSION = "2025-11-25"  # the one handshake version whose core has tasks
TASK_TOOLS = frozenset({"verify", "verify_batch", "profile", "bench", "run_loop"})
CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
POLL_MS = 2000  # a verify takes seconds to minutes
DEFAULT_TTL_MS = 3_600_000  # ttl: an hour from creation (and while it runs) unless the client asks otherwise
TTL_RANGE_MS = (60_000, 86_400_000)
PAGE = 100  # tasks per tasks/list page
TERMINAL = frozenset({"completed", "failed", "cancelled"})


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _dump(result: Any) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True) if isinstance(result, BaseModel) else result


@dataclass
class TaskRun:
    """One task: the call running in the background and, once it submitted one, its job."""

    legacy: bool  # 2025-11-25 field names and status rules
    tool: str
    ttl_ms: int = DEFAULT_TTL_MS
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    job: Job | None = None
    created: str = field(default_factory=_now)
    updated: str = ""
    started: float = field(default_factory=time.monotonic)
    cancelled: bool = False
    value: Any = None  # the call's result as the handler returned it
    result: dict[str, Any] | None = None  # ... and on the wire
    error: ErrorData | None = None  # the JSON-RPC error the call ended with
    session: Any = None  # where a 2025-11-25 status notification goes
    attached: anyio.Event = field(default_factory=anyio.Event)  # the job is known (or the call is over)
    detached: anyio.Event = field(default_factory=anyio.Event)  # the caller has its task: no more progress
    finished: anyio.Event = field(default_factory=anyio.Event)

    def __post_init__(self):
        self.updated = self.created

    def attach(self, job: Job) -> None:
        """Called by run_tool_job: the task takes its job's id."""
        self.job, self.id = job, job.id
        self.attached.set()

    def expired(self) -> bool:
        """Past its ttl and over: a task still working is kept however long it runs."""
        return self.finished.is_set() and time.monotonic() - self.started > self.ttl_ms / 1000

    @property
    def status(self) -> str:
        if self.cancelled or (self.job is not None and self.job.status == "cancelled"):  # tasks/cancel or job_cancel
            return "cancelled"
        if not self.finished.is_set():
            return "working"
        if self.error is not None:
            return "failed"
        # 2025-11-25 counts a tool error (isError) as failed; the 2026-07-28 extension as completed
        if self.legacy and self.result and self.result.get("isError"):
            return "failed"
        return "completed"

    def message(self) -> str | None:
        status = self.status
        if status == "cancelled":
            return "cancelled by request"
        if status == "working":
            return self.job.progress or self.job.status if self.job else "starting"
        if self.error is not None:
            return self.error.message
        if self.result and self.result.get("isError"):
            return "".join(c.get("text", "") for c in self.result.get("content", []))[:500] or "tool error"
        return None

    def wire(self, detailed: bool = False) -> dict[str, Any]:
        """The Task object in this task's protocol version; ``detailed`` (2026-07-28 tasks/get) inlines
        the result or the error."""
        ttl, poll = ("ttl", "pollInterval") if self.legacy else ("ttlMs", "pollIntervalMs")
        task: dict[str, Any] = {
            "taskId": self.id,
            "status": self.status,
            "createdAt": self.created,
            "lastUpdatedAt": self.updated,
        }
        if (message := self.message()) is not None:
            task["statusMessage"] = message
        task |= {ttl: self.ttl_ms, poll: POLL_MS}
        if detailed and task["status"] == "completed":
            task["result"] = self.result
        if detailed and task["status"] == "failed" and self.error is not None:
            task["error"] = self.error.model_dump(mode="json", exclude_none=True)
        return task


class UpdateTaskParams(RequestParams):
    task_id: str
    input_responses: dict[str, Any] | None = None


def _wait_s(arguments: dict[str, Any] | None) -> float:
    value = (arguments or {}).get("wait_s", DEFAULT_WAIT_S)
    return float(value) if isinstance(value, int | float) and value >= 0 else DEFAULT_WAIT_S


def _declared(ctx) -> bool:
    caps = ctx.session.client_capabilities
    return bool(caps and caps.extensions and IDENTIFIER in caps.extensions)


class Tasks(Extension):
    """The Tasks extension (2026-07-28) and the 2025-11-25 tasks utility over one task table."""

    identifier = IDENTIFIER

    def __init__(self, app: App):
        self.app = app
        self._tasks: OrderedDict[str, TaskRun] = OrderedDict()

    # ---- contributions to the SDK's server ----

    def methods(self):
        legacy, modern = frozenset({TASKS_VERSION}), frozenset(MODERN_PROTOCOL_VERSIONS)
        return [
            MethodBinding("tasks/get", GetTaskRequestParams, self.get, protocol_versions=legacy | modern),
            MethodBinding("tasks/cancel", CancelTaskRequestParams, self.cancel, protocol_versions=legacy | modern),
            MethodBinding("tasks/result", GetTaskPayloadRequestParams, self.result, protocol_versions=legacy),
            MethodBinding("tasks/list", PaginatedRequestParams, self.list, protocol_versions=legacy),
            MethodBinding("tasks/update", UpdateTaskParams, self.update, protocol_versions=modern),
        ]

    async def intercept_tool_call(self, params, ctx, call_next):
        """2026-07-28: the server decides. A declaring client's long call that outlives its wait_s
        answers with a task instead of a job id."""
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS or params.name not in TASK_TOOLS or not _declared(ctx):
            return await call_next(ctx)
        run = TaskRun(legacy=False, tool=params.name)
        await self._start(ctx, run, lambda: call_next(ctx))
        with anyio.move_on_after(_wait_s(params.arguments) - (time.monotonic() - run.started)):
            await run.finished.wait()
        if run.finished.is_set() and not run.cancelled:
            if run.error is not None:
                raise MCPError.from_error_data(run.error)
            return run.value
        run.detached.set()
        self._keep(run)
        return {"resultType": "task", **run.wire()}

    async def middleware(self, ctx, call_next):
        """2025-11-25: the client decides, with ``task`` on tools/call, and gets CreateTaskResult at once.
        Server middleware, because the SDK shapes a handler's 2025 tools/call result as a CallToolResult.
        Also declares ``capabilities.tasks`` in that version's initialize result."""
        if ctx.method == "initialize":
            result = await call_next(ctx)
            if isinstance(result, dict) and result.get("protocolVersion") == TASKS_VERSION:
                result["capabilities"] = {**result.get("capabilities", {}), "tasks": CAPABILITY}
            return result
        params = ctx.params or {}
        if ctx.method != "tools/call" or ctx.protocol_version != TASKS_VERSION or params.get("task") is None:
            return await call_next(ctx)
        name = params.get("name")
        if name not in TASK_TOOLS:  # the spec's answer for a tool whose taskSupport is forbidden
            raise MCPError(code=METHOD_NOT_FOUND, message=f"tool '{name}' does not run as a task")
        task = params["task"] if isinstance(params["task"], dict) else {}
        ttl = task.get("ttl")
        ttl_ms = min(max(int(ttl), TTL_RANGE_MS[0]), TTL_RANGE_MS[1]) if isinstance(ttl, int | float) else None
        run = TaskRun(legacy=True, tool=name, ttl_ms=ttl_ms or DEFAULT_TTL_MS, session=ctx.session)
        await self._start(ctx, run, lambda: call_next(ctx))
        run.detached.set()
        self._keep(run)
        text = f"{name} runs as task {run.id}; tasks/result (or job_result) gives its result"
        return {"task": run.wire(), "_meta": {IMMEDIATE_RESPONSE: text}}

    # ---- running ----

    async def _start(self, ctx, run: TaskRun, call: Callable[[], Awaitable[Any]]) -> None:
        """Run the call in the server's lifespan task group; return once its job exists (the task id
        is final and tasks/get finds it) or the call is already over (bad arguments, a quick error)."""

        async def background() -> None:
            TASK_RUN.set(run)  # this task's own context: run_tool_job attaches the job to it
            try:
                run.value = await call()
                run.result = _dump(run.value)
            except MCPError as e:
                run.error = e.error
            except Exception as e:  # noqa: BLE001  (the task fails; the server serves on)
                logger.exception("task %s (%s) raised", run.id, run.tool)
                run.error = ErrorData(code=INTERNAL_ERROR, message=f"{run.tool} failed: {type(e).__name__}")
            finally:
                run.finished.set()
                run.attached.set()
                if not run.cancelled:
                    run.updated = _now()
                    await self._notify(run)

        ctx.lifespan_context["task_group"].start_soon(background)
        await run.attached.wait()

    def _keep(self, run: TaskRun) -> None:
        self._tasks[run.id] = run
        while len(self._tasks) > MAX_KEPT_JOBS:
            self._tasks.popitem(last=False)

    async def _notify(self, run: TaskRun) -> None:
        """2025-11-25: notifications/tasks/status when a task ends (optional in the spec, best effort)."""
        if run.session is None or not run.detached.is_set():
            return
        try:
            params = TaskStatusNotificationParams.model_validate(run.wire())
            await run.session.send_notification(TaskStatusNotification(params=params))
        except Exception:  # noqa: BLE001  (a gone client must not fail the task)
            logger.debug("task %s: status notification not delivered", run.id)

    def _find(self, ctx, task_id: str) -> TaskRun:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            require_client_extension(ctx, IDENTIFIER)
        run = self._tasks.get(task_id)
        if run is not None and run.expired():
            del self._tasks[task_id]
            raise MCPError(code=INVALID_PARAMS, message=f"task '{task_id}' has expired (ttl {run.ttl_ms} ms)")
        if run is None:
            raise MCPError(code=INVALID_PARAMS, message=f"unknown task '{task_id}' (tasks are kept in memory)")
        return run

    # ---- methods ----

    async def get(self, ctx, params: GetTaskRequestParams) -> dict[str, Any]:
        run = self._find(ctx, params.task_id)
        return run.wire(detailed=not run.legacy)

    async def result(self, ctx, params: GetTaskPayloadRequestParams) -> dict[str, Any]:
        """2025-11-25: wait for the end; then exactly what the call returned (its result or its error)."""
        run = self._find(ctx, params.task_id)
        await run.finished.wait()
        if run.error is not None:
            raise MCPError.from_error_data(run.error)
        result = run.result or {}
        return {**result, "_meta": {**(result.get("_meta") or {}), RELATED_TASK: {"taskId": run.id}}}

    async def list(self, ctx, params: PaginatedRequestParams) -> dict[str, Any]:
        runs = [r for r in self._tasks.values() if not r.expired()]
        cursor = params.cursor if params else None
        start = 0
        if cursor is not None:
            if not cursor.isdigit() or int(cursor) > len(runs):
                raise MCPError(code=INVALID_PARAMS, message=f"invalid tasks/list cursor '{cursor}'")
            start = int(cursor)
        page = runs[start : start + PAGE]
        result: dict[str, Any] = {"tasks": [r.wire() for r in page]}
        if start + PAGE < len(runs):
            result["nextCursor"] = str(start + PAGE)
        return result

    async def cancel(self, ctx, params: CancelTaskRequestParams) -> dict[str, Any]:
        """Cancel the task's job (its worker is killed, as job_cancel does). The task is cancelled at
        once and stays so; 2025-11-25 refuses a task already over, 2026-07-28 acknowledges."""
        run = self._find(ctx, params.task_id)
        if run.status in TERMINAL:
            if run.legacy:
                raise MCPError(code=INVALID_PARAMS, message=f"task '{run.id}' is already {run.status}")
            return {}
        run.cancelled, run.updated = True, _now()
        if run.job is not None:
            self.app.jobs.cancel(run.job.id)
        await self._notify(run)
        return run.wire() if run.legacy else {}

    async def update(self, ctx, params: UpdateTaskParams) -> dict[str, Any]:
        """2026-07-28: these tasks never ask for input, so there is nothing to take; acknowledged."""
        self._find(ctx, params.task_id)
        return {}
