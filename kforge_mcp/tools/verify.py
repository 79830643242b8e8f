"""verify: is the candidate correct, and how fast is it against eager and torch.compile?"""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from ..schemas import VerifyReport
from .common import DEFAULT_WAIT_S, App, run_tool_job


def register(mcp: MCPServer, app: App) -> None:
    @mcp.tool()
    async def verify(
        problem: Annotated[
            str,
            Field(description="reference in KernelBench form (Model, get_inputs, get_init_inputs): text or a .py path"),
        ],
        candidate: Annotated[str, Field(description="source defining class ModelNew: text or a .py path")],
        target: Annotated[str, Field(description="cuda, cute, triton or metal")],
        ctx: Context,
        device: Annotated[
            str | None, Field(description="e.g. cuda:0, xpu:0 or cpu; default: the best one here")
        ] = None,
        trials: Annotated[int, Field(ge=1, le=100, description="correctness trials, each on fresh inputs")] = 5,
        atol: Annotated[float | None, Field(ge=0, description="default per dtype: fp32 1e-4, fp16/bf16 1e-2")] = None,
        rtol: Annotated[float | None, Field(ge=0, description="default per dtype: fp32 1e-4, fp16/bf16 1e-2")] = None,
        timeout_s: Annotated[float, Field(gt=0, le=3600, description="the worker is killed after this")] = 300.0,
        wait_s: Annotated[float, Field(ge=0, description="return a job_id if not done by then")] = DEFAULT_WAIT_S,
        baselines: Annotated[list[Literal["eager", "compiled"]], Field(description="baselines to time")] = [
            "eager",
            "compiled",
        ],  # noqa: B006
    ) -> VerifyReport:
        """Check a candidate kernel against its PyTorch reference (same weights, fresh inputs
        per trial, per-dtype tolerances) in an isolated worker, then time it against eager
        PyTorch and torch.compile. verdict: pass, fail (wrong: see mismatches), suspicious,
        or error (could not run: see errors and diagnostics)."""

        def work(progress, cancel):
            return app.engine.verify(
                problem,
                candidate,
                target=target,
                device=device,
                trials=trials,
                atol=atol,
                rtol=rtol,
                timeout_s=timeout_s,
                baselines=baselines,
                on_progress=progress,
                cancel=cancel,
            )

        return await run_tool_job(
            app, "verify", work, wait_s, ctx, lambda job: VerifyReport(status="running", job_id=job.id, target=target)
        )
