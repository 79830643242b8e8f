"""job_status, job_result, job_cancel: follow calls that outlived their wait_s."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from kforge_mcp.core.errors import KforgeError
from kforge_mcp.core.schemas import JobInfo
from kforge_mcp.tools.common import READ_ONLY, App, hints, wait_for


def register(mcp: MCPServer, app: App) -> None:
    def find(job_id: str):
        try:
            return app.jobs.get(job_id)
        except KforgeError as e:
            raise ToolError(str(e)) from None

    @mcp.tool(annotations=READ_ONLY)
    async def job_status(job_id: str) -> JobInfo:
        """Status of a job (queued, running, done, failed, cancelled) and its latest progress."""
        return find(job_id).info()

    @mcp.tool(annotations=READ_ONLY)
    async def job_result(
        job_id: str,
        ctx: Context,
        wait_s: Annotated[float, Field(ge=0, le=55, description="wait this long for it to finish")] = 0.0,
    ) -> JobInfo:
        """The job's own result (the verify or compile report) once done; the error if it failed."""
        job = find(job_id)
        await wait_for(job, wait_s, ctx)
        return job.info(with_result=True)

    # destructive: the job's worker is killed and its unfinished work lost
    @mcp.tool(annotations=hints(read_only=False, destructive=True))
    async def job_cancel(job_id: str) -> JobInfo:
        """Cancel a job: its worker is killed and replaced; the server keeps serving."""
        job = find(job_id)
        if not job.done.is_set():
            job.cancel.set()
            await wait_for(job, 5.0, None)
        return job.info()
