"""bench: judge a suite of problems and their candidates (the ``kforge bench`` layout) and score it:
correct share, geomean speedup and KernelBench's fast_p. Hosts that show images get the suite's
plot (best speedup per problem and the fast_p curve) with the result."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from kforge_mcp.core.errors import KforgeError
from kforge_mcp.core.options import VERIFY, Baselines, TimeoutS, Trials
from kforge_mcp.core.problem import check_allowed_path
from kforge_mcp.core.schemas import JobAware
from kforge_mcp.suite import run_bench
from kforge_mcp.suite_report import BenchSummary
from kforge_mcp.tools import artifacts
from kforge_mcp.tools.common import DEFAULT_WAIT_S, RUNS_CODE, App, run_tool_job, target_field
from kforge_mcp.tools.links import with_artifacts


class BenchResult(JobAware):
    bench: BenchSummary | None = Field(None, description="the suite's scores, per problem and in all")


def register(mcp: MCPServer, app: App) -> None:
    @mcp.tool(annotations=RUNS_CODE)
    async def bench(
        problems: Annotated[str, Field(description="a folder of KernelBench-form problems (*.py)")],
        candidates: Annotated[
            str, Field(description="a folder of candidates: <problem stem>/*.py, or flat <problem stem>.py")
        ],
        ctx: Context,
        target: Annotated[str, target_field()] = "triton",
        device: Annotated[str | None, Field(description="e.g. cuda:0 or cpu; default: the best one here")] = None,
        trials: Trials = VERIFY.trials,
        timeout_s: Annotated[TimeoutS, Field(description="per candidate")] = VERIFY.timeout_s,
        baselines: Annotated[Baselines, Field(description="baselines to time")] = VERIFY.baselines,
        timing_budget_s: Annotated[float, Field(gt=0, le=60)] = VERIFY.timing_budget_s,
        wait_s: Annotated[float, Field(ge=0, description="return a job_id if not done by then")] = DEFAULT_WAIT_S,
    ) -> BenchResult:
        """Judge every candidate of every problem in a suite (a KernelBench level folder works as it
        is) and score it: per problem the best correct candidate and its speedup; in all the correct
        share, geomean speedup and fast_p (the share correct and faster than p x the baseline).
        Results are kept under the engine's home, so a rerun judges only new or changed files."""
        for role, folder in (("problems", problems), ("candidates", candidates)):  # listed only where allowed
            try:
                check_allowed_path(folder, role, app.engine.allow_dirs)
            except KforgeError as e:
                raise ToolError(str(e)) from None
        # one output folder per (problems, candidates, target): its results.jsonl makes reruns cheap
        key = hashlib.sha256(f"{Path(problems).resolve()}\0{Path(candidates).resolve()}\0{target}".encode())
        out = Path(app.engine.home) / "bench" / key.hexdigest()[:16]

        def work(progress, cancel):
            summary = run_bench(
                problems,
                candidates,
                target,
                out,
                engine=app.engine,
                device=device,
                trials=trials,
                timeout_s=timeout_s,
                baselines=baselines,
                timing_budget_s=timing_budget_s,
                on_progress=lambda done, total, message: progress(f"{done}/{total} {message}"),
                cancel=cancel,
            )
            return BenchResult(bench=summary)

        result = await run_tool_job(
            app, "bench", work, wait_s, ctx, lambda job: BenchResult(status="running", job_id=job.id)
        )
        files = result.bench.files if result.bench else {}
        reports = {Path(files[k]).name: Path(files[k]).read_text() for k in ("summary", "html") if k in files}
        links = artifacts.keep(app.engine.home, reports, "the suite's report") if reports else []
        # annotated with the output schema: the SDK passes the CallToolResult through
        return with_artifacts(result, links, Path(files["png"]) if "png" in files else None)  # type: ignore[return-value]
