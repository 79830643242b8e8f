"""verify: is the candidate correct, and how fast is it against eager and torch.compile?"""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult

from kforge_mcp.core.options import VerifyCall
from kforge_mcp.core.schemas import VerifyReport
from kforge_mcp.tools.common import RUNS_CODE, App, model_tool, run_tool_job
from kforge_mcp.tools.links import result


def register(mcp: MCPServer, app: App) -> None:
    @model_tool(mcp, VerifyCall, VerifyReport, RUNS_CODE)
    async def verify(call: VerifyCall, wait_s: float, ctx: Context) -> CallToolResult:
        """Check a candidate kernel against its PyTorch reference (same weights: both models are built under one
        seed, so ModelNew must draw its parameters as Model does, in the same order; fresh inputs per trial, judged
        at a precision and tolerances the report states) in an isolated worker, then time it against eager
        PyTorch and torch.compile on fresh inputs every call. verdict: pass, fail (wrong: see mismatches),
        suspicious, or error (could not run: see errors and diagnostics)."""

        def work(progress, cancel):
            return app.engine.verify_call(call, on_progress=progress, cancel=cancel)

        running = lambda job: VerifyReport(status="running", job_id=job.id, target=call.target)  # noqa: E731
        return result(await run_tool_job(app, "verify", work, wait_s, ctx, running))
