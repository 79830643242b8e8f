"""verify_batch: verify many candidates at once, on every worker the executor has."""

from __future__ import annotations

import time
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

from kforge_mcp.core.options import TRIAL_LIMIT_TEXT, VERIFY, Baselines, TimeoutS, Tolerance, Trials
from kforge_mcp.core.schemas import VerifyBatchReport, summarize_batch
from kforge_mcp.tools.common import DEFAULT_WAIT_S, RUNS_CODE, App, run_tool_job, target_field, target_names

MAX_ITEMS = 256


class BatchItem(BaseModel):
    problem: str = Field(description="reference in KernelBench form: text or a .py path")
    candidate: str = Field(description="source defining class ModelNew: text or a .py path")
    target: Annotated[str | None, target_field("overrides the batch's target", optional=True)] = None
    device: str | None = Field(None, description="overrides the batch's device")


def register(mcp: MCPServer, app: App) -> None:
    @mcp.tool(annotations=RUNS_CODE)
    async def verify_batch(
        items: Annotated[
            list[BatchItem], Field(min_length=1, max_length=MAX_ITEMS, description="the candidates to verify")
        ],
        ctx: Context,
        target: Annotated[str, target_field(f"{target_names()} (an item may override it)")] = "triton",
        device: Annotated[str | None, Field(description="e.g. cuda:0 or cpu; default: the best one here")] = None,
        trials: Annotated[Trials, Field(description="correctness trials per candidate")] = VERIFY.trials,
        atol: Annotated[Tolerance, Field(description="default per dtype")] = VERIFY.atol,
        rtol: Annotated[Tolerance, Field(description="default per dtype")] = VERIFY.rtol,
        timeout_s: Annotated[
            TimeoutS, Field(description=f"per candidate: its worker is killed after this; {TRIAL_LIMIT_TEXT}")
        ] = VERIFY.timeout_s,
        wait_s: Annotated[float, Field(ge=0, description="return a job_id if not done by then")] = DEFAULT_WAIT_S,
        baselines: Annotated[Baselines, Field(description="baselines to time")] = VERIFY.baselines,
    ) -> VerifyBatchReport:
        """Verify many candidates (e.g. several variants of one kernel) at once, as many side by
        side as the executor has workers for (several nodes with the Ray executor). Progress
        arrives as each item finishes; the result holds one VerifyReport per item, in item order,
        and a summary: counts by verdict and the fastest passing item."""

        def work(progress, cancel):
            started = time.perf_counter()
            reports = app.engine.verify_batch(
                [i.model_dump(exclude_none=True) for i in items],
                on_progress=progress,
                cancel=cancel,
                target=target,
                device=device,
                trials=trials,
                atol=atol,
                rtol=rtol,
                timeout_s=timeout_s,
                baselines=baselines,
            )
            return VerifyBatchReport(reports=reports, summary=summarize_batch(reports, time.perf_counter() - started))

        return await run_tool_job(
            app, "verify_batch", work, wait_s, ctx, lambda job: VerifyBatchReport(status="running", job_id=job.id)
        )
