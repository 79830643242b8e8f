"""compile: build a candidate's kernels without running them."""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult

from kforge_mcp.core.options import CompileCall
from kforge_mcp.core.schemas import CompileReport
from kforge_mcp.tools.artifacts import file_name, keep
from kforge_mcp.tools.common import READ_ONLY, App, model_tool, run_tool_job
from kforge_mcp.tools.links import result


def register(mcp: MCPServer, app: App) -> None:
    @model_tool(mcp, CompileCall, CompileReport, READ_ONLY)
    async def compile(call: CompileCall, wait_s: float, ctx: Context) -> CallToolResult:
        """Compile a candidate's kernels for a GPU arch without running them (no GPU needed).
        Returns ok, diagnostics pointing at lines of the submitted source, and per-kernel
        registers, spills and shared memory."""

        def work(progress, cancel):
            return app.engine.compile_call(call, on_progress=progress, cancel=cancel)

        running = lambda job: CompileReport(ok=False, target=call.target, status="running", job_id=job.id)  # noqa: E731
        report = await run_tool_job(app, "compile", work, wait_s, ctx, running)
        if not report.ptx:
            return result(report)
        files = {file_name(kernel, ".ptx"): text for kernel, text in report.ptx.items()}
        files |= {file_name(kernel, ".sass"): text for kernel, text in (report.sass or {}).items()}
        links = await anyio.to_thread.run_sync(keep, app.engine.home, files, "PTX or SASS of a kernel")
        return result(report, links)  # also as files a host can open
