"""analyze_profile: the performance-analysis agent over a profile report, a captured profiler file, or a screenshot."""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult

from kforge_mcp.core.options import AnalyzeCall
from kforge_mcp.profiling import loader
from kforge_mcp.profiling.report import AnalysisReport
from kforge_mcp.tools.common import READ_ONLY, App, model_tool, run_tool_job
from kforge_mcp.tools.links import result


def register(mcp: MCPServer, app: App) -> None:
    path = f"a captured file: {loader.readable()} ({loader.MAX_BYTES // 2**20} MB at most)"

    @model_tool(mcp, AnalyzeCall, AnalysisReport, READ_ONLY, described={"path": path})
    async def analyze_profile(call: AnalyzeCall, wait_s: float, ctx: Context) -> CallToolResult:
        """Read a profile and return ranked recommendations: each with a title, the evidence
        (metric, value, what good looks like), a concrete action, an expected gain (fraction of
        device time, with how it was estimated) and a priority; plus a summary. Pass exactly one
        of profile, path or image. Runs no candidate code."""

        def work(progress, cancel):
            return app.engine.analyze_call(call)

        running = lambda job: AnalysisReport(status="running", job_id=job.id)  # noqa: E731
        return result(await run_tool_job(app, "analyze_profile", work, wait_s, ctx, running))
