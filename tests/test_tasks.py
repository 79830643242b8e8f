"""Long calls as MCP tasks, through the SDK's real client, in both protocol versions: the 2025-11-25
tasks utility (the client asks with ``task``; tasks/get, tasks/result, tasks/list, tasks/cancel and
status notifications) and the 2026-07-28 Tasks extension (the server hands out a task when a call
outlives wait_s; the client's extension polls tasks/get). A task is its call's job: job_status sees it.

The SDK (2.3) has task types but no task path of its own: at 2025-11-25 it validates every tools/call
result as a CallToolResult, so the task-augmented call itself goes out through the client's dispatcher;
everything else goes through its typed requests and, at 2026-07-28, its extension claims."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
from conftest import ROOT, example, hostile, problem
from http_server import ServerProcess
from mcp import Client, StdioServerParameters
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolResult,
    CancelTaskRequest,
    CancelTaskRequestParams,
    GetTaskPayloadRequest,
    GetTaskPayloadRequestParams,
    GetTaskRequest,
    GetTaskRequestParams,
    GetTaskResult,
    ListTasksRequest,
    ListTasksResult,
    Result,
    TaskStatusNotificationParams,
)
from pydantic import TypeAdapter

from kforge_mcp.tools.tasks import IDENTIFIER, RELATED_TASK, TASK_TOOLS

pytestmark = pytest.mark.anyio

KFORGE_MCP = Path(sys.executable).parent / "kforge-mcp"
MODES = ["legacy", "2026-07-28"]  # the 2025-11-25 handshake; the stateless 2026-07-28 protocol

VERIFY = {
    "problem": problem("row_softmax"),
    "candidate": example("row_softmax", "triton"),
    "target": "triton",
    "baselines": ["eager"],
    "trials": 2,
}
HANG = {**VERIFY, "candidate": hostile("hang"), "timeout_s": 300}
RAW = TypeAdapter(dict[str, Any])


# ---- a client side for each version, on the SDK's extension points ----


class StatusWatcher(ClientExtension):
    """2025-11-25: hears notifications/tasks/status (a method the SDK's core tables do not know)."""

    identifier = "dev.kforge-tests/task-status"

    def __init__(self):
        self.seen: list[TaskStatusNotificationParams] = []

    def notifications(self):
        async def on_status(params: TaskStatusNotificationParams) -> None:
            self.seen.append(params)

        return [
            NotificationBinding(
                method="notifications/tasks/status", params_type=TaskStatusNotificationParams, handler=on_status
            )
        ]


class TaskHandle(Result):
    """2026-07-28 CreateTaskResult: the Task, flat, tagged resultType "task"."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    status_message: str | None = None


class TaskPoller(ClientExtension):
    """2026-07-28: declares the Tasks extension; a task handed out for a call is polled with tasks/get
    until it ends, and its inlined result becomes the call's result."""

    identifier = IDENTIFIER

    def __init__(self):
        self.handles: list[TaskHandle] = []
        self.statuses: list[str] = []

    def claims(self):
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=self.resolve)]

    async def resolve(self, handle: TaskHandle, ctx: ClaimContext) -> CallToolResult:
        self.handles.append(handle)
        while True:
            task = await ctx.session.send_request(
                GetTaskRequest(params=GetTaskRequestParams(task_id=handle.task_id)), RAW
            )
            self.statuses.append(task["status"])
            if task["status"] == "completed":
                return CallToolResult.model_validate(task["result"])
            assert task["status"] == "working", task
            await anyio.sleep(0.2)  # faster than the server's pollIntervalMs: a test, not a host


async def call_as_task(client: Client, name: str, arguments: dict, ttl_ms: int | None = None) -> dict:
    task = {} if ttl_ms is None else {"ttl": ttl_ms}
    return await client.session._dispatcher.send_raw_request(
        "tools/call", {"name": name, "arguments": arguments, "task": task}, None
    )


async def get(client: Client, task_id: str, as_type=GetTaskResult):
    return await client.session.send_request(GetTaskRequest(params=GetTaskRequestParams(task_id=task_id)), as_type)


async def job_status(client: Client, job_id: str) -> dict:
    return (await client.call_tool("job_status", {"job_id": job_id})).structured_content


# ---- 2025-11-25 ----


async def test_2025_declares_tasks_and_each_long_tool_takes_them(server):
    async with Client(server, mode="legacy") as client:
        caps = client.server_capabilities.tasks
        assert caps is not None and caps.requests.tools.call is not None and caps.cancel is not None
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert {n for n, t in tools.items() if t.execution and t.execution.task_support == "optional"} == TASK_TOOLS
        assert tools["job_status"].execution is None  # absent: forbidden
    async with Client(server) as client:  # discovers: 2026-07-28
        assert client.protocol_version == "2026-07-28"
        assert IDENTIFIER in (client.server_capabilities.extensions or {})


@pytest.mark.slow
async def test_2025_task_verify_answers_at_once_then_gives_the_calls_own_result(server):
    watcher = StatusWatcher()
    async with Client(server, mode="legacy", extensions=[watcher]) as client:
        with anyio.fail_after(10):  # the call's answer comes before the work, not after it
            created = await call_as_task(client, "verify", VERIFY, ttl_ms=120_000)
        task = created["task"]
        assert task["status"] == "working" and task["ttl"] == 120_000 and task["pollInterval"] > 0
        tid = task["taskId"]
        assert (await get(client, tid)).status == "working"
        assert tid in {
            t.task_id for t in (await client.session.send_request(ListTasksRequest(), ListTasksResult)).tasks
        }

        result = await client.session.send_request(
            GetTaskPayloadRequest(params=GetTaskPayloadRequestParams(task_id=tid)), CallToolResult
        )
        assert result.structured_content["verdict"] == "pass", result.content
        assert result.meta[RELATED_TASK] == {"taskId": tid}
        done = await get(client, tid)
        assert done.status == "completed" and done.last_updated_at > done.created_at
        # one mechanism: the task is the call's job
        assert (await job_status(client, tid))["status"] == "done"
        with anyio.fail_after(5):
            while not watcher.seen:
                await anyio.sleep(0.05)
        assert (watcher.seen[-1].task_id, watcher.seen[-1].status) == (tid, "completed")
        with pytest.raises(MCPError) as refused:  # the spec: a task over cannot be cancelled
            await client.session.send_request(CancelTaskRequest(params=CancelTaskRequestParams(task_id=tid)), RAW)
        assert refused.value.code == INVALID_PARAMS and "completed" in refused.value.message


async def test_2025_cancel_stops_a_hung_candidates_job_and_the_task_stays_cancelled(server):
    async with Client(server, mode="legacy") as client:
        tid = (await call_as_task(client, "verify", HANG))["task"]["taskId"]
        await anyio.sleep(1)
        with anyio.fail_after(10):
            cancelled = await client.session.send_request(
                CancelTaskRequest(params=CancelTaskRequestParams(task_id=tid)), GetTaskResult
            )
        assert cancelled.status == "cancelled"
        with anyio.fail_after(30):  # the job's worker is killed, far sooner than timeout_s
            while (await job_status(client, tid))["status"] not in ("cancelled", "failed", "done"):
                await anyio.sleep(0.2)
            await client.session.send_request(
                GetTaskPayloadRequest(params=GetTaskPayloadRequestParams(task_id=tid)), RAW
            )
        assert (await job_status(client, tid))["status"] == "cancelled"
        assert (await get(client, tid)).status == "cancelled"


async def test_2025_job_cancel_of_a_tasks_job_cancels_the_task(server):
    watcher = StatusWatcher()
    async with Client(server, mode="legacy", extensions=[watcher]) as client:
        tid = (await call_as_task(client, "verify", HANG))["task"]["taskId"]
        await client.call_tool("job_cancel", {"job_id": tid})
        with anyio.fail_after(30):
            while not any(s.task_id == tid for s in watcher.seen):
                await anyio.sleep(0.1)
        assert (await get(client, tid)).status == "cancelled"
        assert [s.status for s in watcher.seen if s.task_id == tid] == ["cancelled"]


async def test_2025_a_tool_without_tasks_and_an_unknown_task_get_the_spec_codes(server):
    async with Client(server, mode="legacy") as client:
        with pytest.raises(MCPError) as forbidden:
            await call_as_task(client, "list_targets", {})
        assert forbidden.value.code == METHOD_NOT_FOUND and "list_targets" in forbidden.value.message
        with pytest.raises(MCPError) as unknown:
            await get(client, "nosuchtask")
        assert unknown.value.code == INVALID_PARAMS and "nosuchtask" in unknown.value.message
        # bad arguments: still a task, failed with the tool error the plain call returns
        created = await call_as_task(client, "verify", {**VERIFY, "trials": 0})
        result = await client.session.send_request(
            GetTaskPayloadRequest(params=GetTaskPayloadRequestParams(task_id=created["task"]["taskId"])), CallToolResult
        )
        assert result.is_error and "trials" in result.content[0].text
        assert (await get(client, created["task"]["taskId"])).status == "failed"


@pytest.mark.slow
async def test_2025_run_loop_as_a_task_samples_the_clients_model_and_links_its_run(server):
    from loop_replies import PROBLEM, REPLIES
    from test_loop import MCP_FAST, Scripted, sampler

    agent = Scripted([REPLIES[2]])
    async with Client(server, mode="legacy", sampling_callback=sampler(agent)) as client:
        opts = {"problem": PROBLEM, "target": "triton", **MCP_FAST, "max_iterations": 1, "profile": False}
        tid = (await call_as_task(client, "run_loop", opts))["task"]["taskId"]
        result = await client.session.send_request(
            GetTaskPayloadRequest(params=GetTaskPayloadRequestParams(task_id=tid)), CallToolResult
        )
    out = result.structured_content
    assert not result.is_error and out["status"] == "done", result.content
    assert [a["verdict"] for a in out["attempts"]] == ["pass"] and len(agent.prompts) == 1
    assert any(getattr(c, "uri", None) == f"kforge://runs/{out['run_id']}" for c in result.content)  # run_links


# ---- 2026-07-28 ----


@pytest.mark.slow
async def test_2026_a_call_that_outlives_wait_s_becomes_a_task_the_client_polls_to_its_result(server):
    poller = TaskPoller()
    async with Client(server, mode="2026-07-28", extensions=[poller]) as client:
        result = await client.call_tool("verify", {**VERIFY, "wait_s": 0})
        assert result.structured_content["verdict"] == "pass", result.content
        [handle] = poller.handles
        assert handle.status == "working" and handle.poll_interval_ms > 0
        assert poller.statuses[0] == "working" and poller.statuses[-1] == "completed"
        assert (await job_status(client, handle.task_id))["status"] == "done"

        # the server decides: a call done within wait_s answers as usual, no task
        again = await client.call_tool("verify", {**VERIFY, "wait_s": 600})
        assert again.structured_content["verdict"] == "pass" and len(poller.handles) == 1


@pytest.mark.slow
async def test_2026_without_the_extension_a_long_call_still_gets_a_job_id(server):
    async with Client(server, mode="2026-07-28") as client:
        running = (await client.call_tool("verify", {**VERIFY, "wait_s": 0})).structured_content
        assert running["status"] == "running" and running["job_id"]
        done = {"status": "running"}
        while done["status"] == "running":
            done = (
                await client.call_tool("job_result", {"job_id": running["job_id"], "wait_s": 55})
            ).structured_content
        assert done["status"] == "done" and done["result"]["verdict"] == "pass", done


async def test_2026_cancel_and_tasks_methods_need_the_extension(server):
    async with Client(server, mode="2026-07-28", extensions=[TaskPoller()]) as client:
        handle = await client.session.call_tool("verify", {**HANG, "wait_s": 0}, allow_claimed=True)
        assert isinstance(handle, TaskHandle)
        async with Client(server, mode="2026-07-28") as plain:
            with pytest.raises(MCPError) as missing:
                await get(plain, handle.task_id, RAW)
            assert missing.value.code == MISSING_REQUIRED_CLIENT_CAPABILITY
        ack = await client.session.send_request(
            CancelTaskRequest(params=CancelTaskRequestParams(task_id=handle.task_id)), RAW
        )
        assert ack.get("resultType", "complete") == "complete" and "taskId" not in ack
        assert (await get(client, handle.task_id, RAW))["status"] == "cancelled"
        with anyio.fail_after(30):
            while (await job_status(client, handle.task_id))["status"] in ("queued", "running"):
                await anyio.sleep(0.2)
        assert (await job_status(client, handle.task_id))["status"] == "cancelled"


# ---- over the real transports: a server process, stdio and HTTP ----


async def round_trip(client: Client, mode: str, poller: TaskPoller, watcher: StatusWatcher) -> None:
    """One verify as a task, end to end, in ``mode``."""
    if mode == "legacy":
        tid = (await call_as_task(client, "verify", VERIFY))["task"]["taskId"]
        result = await client.session.send_request(
            GetTaskPayloadRequest(params=GetTaskPayloadRequestParams(task_id=tid)), CallToolResult
        )
        with anyio.fail_after(5):
            while not any(s.task_id == tid and s.status == "completed" for s in watcher.seen):
                await anyio.sleep(0.05)
    else:
        result = await client.call_tool("verify", {**VERIFY, "wait_s": 0})
        tid = poller.handles[-1].task_id
        assert poller.statuses[-1] == "completed"
    assert result.structured_content["verdict"] == "pass", result.content
    assert (await get(client, tid, RAW))["status"] == "completed"
    assert (await job_status(client, tid))["status"] == "done"


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
async def test_stdio_runs_a_task_in_both_versions(tmp_path, mode):
    params = StdioServerParameters(
        command=str(KFORGE_MCP),
        args=["--allow-dir", str(ROOT)],
        env={**os.environ, "KFORGE_HOME": str(tmp_path / "home")},
        cwd=str(tmp_path),
    )
    poller, watcher = TaskPoller(), StatusWatcher()
    async with Client(params, mode=mode, extensions=[poller, watcher]) as client:
        await round_trip(client, mode, poller, watcher)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
async def test_http_runs_a_task_in_both_versions(tmp_path, mode):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    server = ServerProcess(tmp_path / "home").start()
    try:
        poller, watcher = TaskPoller(), StatusWatcher()
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {server.token}"}, timeout=600) as http:
            transport = streamable_http_client(server.url, http_client=http)
            async with Client(transport, mode=mode, extensions=[poller, watcher]) as client:
                await round_trip(client, mode, poller, watcher)
    finally:
        server.stop()
