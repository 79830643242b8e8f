"""analyze_profile: the performance-analysis agent over a profile report, a captured profiler file, or a screenshot."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from kforge_mcp.profiling import loader
from kforge_mcp.profiling.report import AnalysisReport
from kforge_mcp.tools.common import DEFAULT_WAIT_S, READ_ONLY, App, run_tool_job


def register(mcp: MCPServer, app: App) -> None:
    @mcp.tool(annotations=READ_ONLY)
    async def analyze_profile(
        ctx: Context,
        profile: Annotated[dict[str, Any] | None, Field(description="a report returned by the profile tool")] = None,
        path: Annotated[
            str | None,
            Field(description=f"a captured file: {loader.readable()} ({loader.MAX_BYTES // 2**20} MB at most)"),
        ] = None,
        image: Annotated[
            str | None, Field(description="path to a screenshot of a GUI profiler (needs an LLM that reads images)")
        ] = None,
        problem: Annotated[
            str | None,
            Field(description="the reference (text or .py path): adds its roofline and the levers of its structure"),
        ] = None,
        forwards: Annotated[
            int | None, Field(ge=1, description="forwards the captured file holds (default: inferred)")
        ] = None,
        wait_s: Annotated[float, Field(ge=0, description="return a job_id if not done by then")] = DEFAULT_WAIT_S,
    ) -> AnalysisReport:
        """Read a profile and return ranked recommendations: each with a title, the evidence
        (metric, value, what good looks like), a concrete action, an expected gain (fraction of
        device time, with how it was estimated) and a priority; plus a summary. Pass exactly one
        of profile, path or image. Runs no candidate code."""

        def work(progress, cancel):
            return app.engine.analyze_profile(
                profile=profile, path=path, image=image, problem=problem, forwards=forwards
            )

        return await run_tool_job(
            app, "analyze_profile", work, wait_s, ctx, lambda job: AnalysisReport(status="running", job_id=job.id)
        )
