"""bench: judge a suite of problems and their candidates (the ``kforge bench`` layout) and score it:
correct share, geomean speedup and KernelBench's fast_p. Hosts that show images get the suite's
plot (best speedup per problem and the fast_p curve) with the result."""

from __future__ import annotations

import hashlib
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from pydantic import Field

from kforge_mcp.core.errors import KforgeError
from kforge_mcp.core.options import TARGET, Arguments, Baseline, VerifyOptions, field_of
from kforge_mcp.core.problem import check_allowed_path
from kforge_mcp.core.schemas import JobAware
from kforge_mcp.suite import run_bench
from kforge_mcp.suite_report import BenchSummary
from kforge_mcp.tools import artifacts
from kforge_mcp.tools.common import RUNS_CODE, App, model_tool, run_tool_job
from kforge_mcp.tools.links import result


class BenchCall(Arguments):
    """bench: every candidate of every problem in a suite judged and scored."""

    problems: str = Field(description="a folder of KernelBench-form problems (*.py)")
    candidates: str = Field(description="a folder of candidates: <problem stem>/*.py, or flat <problem stem>.py")
    target: str = TARGET
    device: str | None = field_of(VerifyOptions, "device")
    trials: int = field_of(VerifyOptions, "trials")
    timeout_s: float = field_of(VerifyOptions, "timeout_s")
    baselines: list[Baseline] = field_of(VerifyOptions, "baselines")
    timing_budget_s: float = field_of(VerifyOptions, "timing_budget_s")


class BenchResult(JobAware):
    bench: BenchSummary | None = Field(None, description="the suite's scores, per problem and in all")


def register(mcp: MCPServer, app: App) -> None:
    @model_tool(mcp, BenchCall, BenchResult, RUNS_CODE)
    async def bench(call: BenchCall, wait_s: float, ctx: Context) -> CallToolResult:
        """Judge every candidate of every problem in a suite (a KernelBench level folder works as it
        is) and score it: per problem the best correct candidate and its speedup; in all the correct
        share, geomean speedup and fast_p (the share correct and faster than p x the baseline).
        Results are kept under the engine's home, so a rerun judges only new or changed files."""
        for role in ("problems", "candidates"):  # listed only where allowed
            try:
                check_allowed_path(getattr(call, role), role, app.engine.allow_dirs)
            except KforgeError as e:
                raise ToolError(str(e)) from None
        # one output folder per (problems, candidates, target): its results.jsonl makes reruns cheap
        where = f"{Path(call.problems).resolve()}\0{Path(call.candidates).resolve()}\0{call.target}"
        out = Path(app.engine.home) / "bench" / hashlib.sha256(where.encode()).hexdigest()[:16]
        options = call.model_dump(exclude={"problems", "candidates", "target"})

        def work(progress, cancel):
            on_progress = lambda done, total, message: progress(f"{done}/{total} {message}")  # noqa: E731
            summary = run_bench(
                call.problems,
                call.candidates,
                call.target,
                out,
                engine=app.engine,
                on_progress=on_progress,
                cancel=cancel,
                **options,
            )
            return BenchResult(bench=summary)

        report = await run_tool_job(
            app, "bench", work, wait_s, ctx, lambda job: BenchResult(status="running", job_id=job.id)
        )
        files = report.bench.files if report.bench else {}
        reports = {Path(files[k]).name: Path(files[k]).read_text() for k in ("summary", "html") if k in files}
        links = artifacts.keep(app.engine.home, reports, "the suite's report") if reports else []
        return result(report, links, Path(files["png"]) if "png" in files else None)
