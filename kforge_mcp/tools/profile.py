"""profile: where does a candidate's (or the reference's) time go, and how far is it from the speed of light?"""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult

from kforge_mcp import platforms
from kforge_mcp.core.options import ProfileCall
from kforge_mcp.profiling.report import ProfileReport
from kforge_mcp.tools.artifacts import keep
from kforge_mcp.tools.common import RUNS_CODE, App, model_tool, run_tool_job
from kforge_mcp.tools.links import profile_image


def register(mcp: MCPServer, app: App) -> None:
    depth = (
        "timeline: torch.profiler kernels and launches; metrics: also the device's metrics profiler "
        f"({platforms.metrics_profilers()}: occupancy, throughput, coalescing, stalls) when it is installed"
    )

    @model_tool(mcp, ProfileCall, ProfileReport, RUNS_CODE, described={"depth": depth})
    async def profile(call: ProfileCall, wait_s: float, ctx: Context) -> CallToolResult:
        """Profile a candidate (or the reference) in an isolated worker: per-kernel launches, device
        time, grid/block, registers, shared memory, occupancy (plus ncu metrics at depth 'metrics'),
        launches per forward, host overhead, and the reference's roofline (FLOPs, minimum bytes,
        T_SOL, fraction of speed of light) with the levers its FX graph shows (a reduction that folds
        into a smaller Linear, work on weights alone, outputs that do not depend on the inputs), each
        priced in FLOPs and bytes. Pass the result to analyze_profile for advice."""

        def work(progress, cancel):
            return app.engine.profile_call(call, on_progress=progress, cancel=cancel)

        running = lambda job: ProfileReport(status="running", job_id=job.id, target=call.target)  # noqa: E731
        report = await run_tool_job(app, "profile", work, wait_s, ctx, running)
        links = await anyio.to_thread.run_sync(keep, app.engine.home, report.raw, "the profiler's own output")
        return await profile_image(report, links)  # the raw files linked, the roofline drawn
