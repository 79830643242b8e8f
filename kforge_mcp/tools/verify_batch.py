"""verify_batch: verify many candidates at once, on every worker the executor has."""

from __future__ import annotations

import time
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult
from pydantic import BaseModel, Field

from kforge_mcp.core.options import CANDIDATE, PROBLEM, TARGET, VerifyCall, VerifyOptions
from kforge_mcp.core.schemas import VerifyBatchReport, summarize_batch
from kforge_mcp.tools.common import RUNS_CODE, App, model_tool, run_tool_job, target_field
from kforge_mcp.tools.links import result

MAX_ITEMS = 256


class BatchItem(BaseModel):
    problem: str = PROBLEM
    candidate: str = CANDIDATE
    target: Annotated[str | None, target_field("overrides the batch's target", optional=True)] = None
    device: str | None = Field(None, description="overrides the batch's device")


class BatchCall(VerifyOptions):
    """verify_batch: candidates verified side by side, each item judged with the batch's options."""

    items: list[BatchItem] = Field(min_length=1, max_length=MAX_ITEMS, description="the candidates to verify")
    target: str = TARGET

    def calls(self) -> list[VerifyCall]:
        """Each item's verify: the batch's options, with the item's own problem, candidate, target, device."""
        options = {name: getattr(self, name) for name in VerifyCall.model_fields if name in type(self).model_fields}
        return [VerifyCall.model_construct(**(options | item.model_dump(exclude_none=True))) for item in self.items]


def register(mcp: MCPServer, app: App) -> None:
    @model_tool(mcp, BatchCall, VerifyBatchReport, RUNS_CODE)
    async def verify_batch(call: BatchCall, wait_s: float, ctx: Context) -> CallToolResult:
        """Verify many candidates (e.g. several variants of one kernel) at once, as many side by
        side as the executor has workers for (several nodes with the Ray executor). Progress
        arrives as each item finishes; the result holds one VerifyReport per item, in item order,
        and a summary: counts by verdict and the fastest passing item."""

        def work(progress, cancel):
            started = time.perf_counter()
            reports = app.engine.batch_call(call.calls(), on_progress=progress, cancel=cancel)
            return VerifyBatchReport(reports=reports, summary=summarize_batch(reports, time.perf_counter() - started))

        running = lambda job: VerifyBatchReport(status="running", job_id=job.id)  # noqa: E731
        return result(await run_tool_job(app, "verify_batch", work, wait_s, ctx, running))
