"""verify: is the candidate correct, and how fast is it against eager and torch.compile?"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from kforge_mcp.core.options import (
    TRIAL_LIMIT_TEXT,
    VERIFY,
    Baselines,
    Precision,
    Seed,
    TimeoutS,
    TimingSets,
    Tolerance,
    Trials,
)
from kforge_mcp.core.schemas import VerifyReport
from kforge_mcp.tools.common import DEFAULT_WAIT_S, RUNS_CODE, App, run_tool_job, target_field


def register(mcp: MCPServer, app: App) -> None:
    @mcp.tool(annotations=RUNS_CODE)
    async def verify(
        problem: Annotated[
            str,
            Field(description="reference in KernelBench form (Model, get_inputs, get_init_inputs): text or a .py path"),
        ],
        candidate: Annotated[str, Field(description="source defining class ModelNew: text or a .py path")],
        target: Annotated[str, target_field()],
        ctx: Context,
        device: Annotated[
            str | None, Field(description="e.g. cuda:0, xpu:0 or cpu; default: the best one here")
        ] = None,
        trials: Annotated[Trials, Field(description="correctness trials, each on fresh inputs")] = VERIFY.trials,
        atol: Annotated[
            Tolerance, Field(description="default per precision: fp32 1e-4, tf32 5e-3, fp16/bf16 1e-2")
        ] = VERIFY.atol,
        rtol: Annotated[
            Tolerance, Field(description="default per precision: fp32 1e-4, tf32 5e-3, fp16/bf16 1e-2")
        ] = VERIFY.rtol,
        timeout_s: Annotated[
            TimeoutS, Field(description=f"the worker is killed after this; {TRIAL_LIMIT_TEXT}")
        ] = VERIFY.timeout_s,
        wait_s: Annotated[float, Field(ge=0, description="return a job_id if not done by then")] = DEFAULT_WAIT_S,
        baselines: Annotated[Baselines, Field(description="baselines to time")] = VERIFY.baselines,
        precision: Annotated[
            Precision | None,
            Field(
                description="dtype both models run in and the default tolerance; default: the problem's, else its dtypes"
            ),
        ] = VERIFY.precision,
        seed: Annotated[
            Seed, Field(description="seed of inputs and weights; default: fresh per call (reported)")
        ] = None,
        timing_sets: Annotated[
            TimingSets,
            Field(
                description="'main': time get_inputs() only; 'all': also each get_input_sets() shape, with its "
                "speedup and the geomean over all (input_sets, speedup_geomean)"
            ),
        ] = VERIFY.timing_sets,
    ) -> VerifyReport:
        """Check a candidate kernel against its PyTorch reference (same weights: both models are built
        under one seed, so ModelNew must draw its parameters as Model does, in the same order; fresh inputs
        per trial, judged at a precision and tolerances the report states) in an isolated worker,
        then time it against eager PyTorch and torch.compile on fresh inputs every call. verdict: pass, fail (wrong: see mismatches), suspicious,
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
                precision=precision,
                seed=seed,
                timing_sets=timing_sets,
                on_progress=progress,
                cancel=cancel,
            )

        return await run_tool_job(
            app, "verify", work, wait_s, ctx, lambda job: VerifyReport(status="running", job_id=job.id, target=target)
        )
