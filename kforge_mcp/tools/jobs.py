"""job_status, job_result, job_cancel: follow calls that outlived their wait_s."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from kforge_mcp.core.errors import KforgeError
from kforge_mcp.core.schemas import JobInfo
from kforge_mcp.profiling.report import ProfileReport
from kforge_mcp.runtime.jobs import Job
from kforge_mcp.tools.artifacts import keep
from kforge_mcp.tools.common import READ_ONLY, App, hints, wait_for
from kforge_mcp.tools.links import profile_image, result
from kforge_mcp.tools.summaries import summary

JobId = Annotated[str, Field(description="the job_id a call answered with when it outlived its wait_s")]


async def with_result(job: Job, home: Path) -> CallToolResult:
    """The job's info with its own result whole in the structured content, and in the text its summary; a
    profile's result comes with what the profile tool gives when it answers in time: links to the profiler's own
    files and its roofline drawn."""
    answer = result(job.info(with_result=True))
    if job.result is None:
        return answer
    answer.content.append(TextContent(type="text", text=summary(job.result)))
    if isinstance(job.result, ProfileReport):
        links = await anyio.to_thread.run_sync(keep, home, job.result.raw, "the profiler's own output")
        drawn = await profile_image(job.result, links)
        answer.content += [c for c in drawn.content if not isinstance(c, TextContent)]
    return answer


def register(mcp: MCPServer, app: App) -> None:
    def find(job_id: str) -> Job:
        try:
            return app.jobs.get(job_id)
        except KforgeError as e:
            raise ToolError(str(e)) from None

    @mcp.tool(annotations=READ_ONLY)
    async def job_status(job_id: JobId) -> Annotated[CallToolResult, JobInfo]:
        """Status of a job (queued, running, done, failed, cancelled) and its latest progress."""
        return result(find(job_id).info())

    @mcp.tool(annotations=READ_ONLY)
    async def job_result(
        job_id: JobId,
        ctx: Context,
        wait_s: Annotated[float, Field(ge=0, le=55, description="wait this long for it to finish")] = 0.0,
    ) -> Annotated[CallToolResult, JobInfo]:
        """The job's own result (the verify or compile report) once done; the error if it failed."""
        job = find(job_id)
        await wait_for(job, wait_s, ctx)
        return await with_result(job, app.engine.home)

    # destructive: the job's worker is killed and its unfinished work lost
    @mcp.tool(annotations=hints(read_only=False, destructive=True))
    async def job_cancel(job_id: JobId) -> Annotated[CallToolResult, JobInfo]:
        """Cancel a job: its worker is killed and replaced; the server keeps serving."""
        job = find(job_id)
        if not job.done.is_set():
            job.cancel.set()
            await wait_for(job, 5.0, None)
        return result(job.info())
