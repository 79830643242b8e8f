"""profile: where does a candidate's (or the reference's) time go, and how far is it from the speed of light?"""

from __future__ import annotations

from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from kforge_mcp import platforms
from kforge_mcp.core.options import PROFILE, Depth, Iterations, TimeoutS
from kforge_mcp.profiling.report import ProfileReport
from kforge_mcp.tools.artifacts import keep
from kforge_mcp.tools.common import DEFAULT_WAIT_S, RUNS_CODE, App, run_tool_job, target_field
from kforge_mcp.tools.links import profile_image


def register(mcp: MCPServer, app: App) -> None:
    @mcp.tool(annotations=RUNS_CODE)
    async def profile(
        problem: Annotated[str, Field(description="reference in KernelBench form: text or a .py path")],
        target: Annotated[str, target_field()],
        ctx: Context,
        candidate: Annotated[
            str | None,
            Field(
                description="source defining class ModelNew (text or .py path); omit to profile the PyTorch reference"
            ),
        ] = None,
        device: Annotated[str | None, Field(description="e.g. cuda:0 or cpu; default: the best one here")] = None,
        depth: Annotated[
            Depth,
            Field(
                description="timeline: torch.profiler kernels and launches; metrics: also the device's metrics "
                f"profiler ({platforms.metrics_profilers()}: occupancy, throughput, coalescing, stalls) when it is "
                "installed"
            ),
        ] = PROFILE.depth,
        iterations: Annotated[
            Iterations, Field(description="profiled forwards (after 2 warm-up forwards)")
        ] = PROFILE.iterations,
        proton: Annotated[
            bool, Field(description="also run Triton's proton profiler (separate process)")
        ] = PROFILE.proton,
        device_model: Annotated[
            str | None,
            Field(
                description="a device of the peaks table (e.g. h200, b200): the roofline is that device's, "
                "marked as a model, from any machine"
            ),
        ] = None,
        timeout_s: TimeoutS = PROFILE.timeout_s,
        wait_s: Annotated[float, Field(ge=0, description="return a job_id if not done by then")] = DEFAULT_WAIT_S,
    ) -> ProfileReport:
        """Profile a candidate (or the reference) in an isolated worker: per-kernel launches, device
        time, grid/block, registers, shared memory, occupancy (plus ncu metrics at depth 'metrics'),
        launches per forward, host overhead, and the reference's roofline (FLOPs, minimum bytes,
        T_SOL, fraction of speed of light) with the levers its FX graph shows (a reduction that folds
        into a smaller Linear, work on weights alone, outputs that do not depend on the inputs), each
        priced in FLOPs and bytes. Pass the result to analyze_profile for advice."""

        def work(progress, cancel):
            return app.engine.profile(
                problem,
                candidate,
                target=target,
                device=device,
                depth=depth,
                iterations=iterations,
                proton=proton,
                device_model=device_model,
                timeout_s=timeout_s,
                on_progress=progress,
                cancel=cancel,
            )

        result = await run_tool_job(
            app, "profile", work, wait_s, ctx, lambda job: ProfileReport(status="running", job_id=job.id, target=target)
        )
        links = await anyio.to_thread.run_sync(keep, app.engine.home, result.raw, "the profiler's own output")
        # the raw files linked, the roofline drawn
        # annotated with the output schema: the SDK passes the CallToolResult through
        return await profile_image(result, links)  # type: ignore[return-value]
