"""compile: build a candidate's kernels without running them."""

from __future__ import annotations

from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from kforge_mcp.core.schemas import CompileReport
from kforge_mcp.tools.artifacts import file_name, keep
from kforge_mcp.tools.common import DEFAULT_WAIT_S, READ_ONLY, App, run_tool_job, target_field
from kforge_mcp.tools.links import with_artifacts


def register(mcp: MCPServer, app: App) -> None:
    @mcp.tool(annotations=READ_ONLY)
    async def compile(
        target: Annotated[str, target_field()],
        ctx: Context,
        source: Annotated[
            str | None, Field(description="candidate source text, or a path to a .py file (or give `candidate`)")
        ] = None,
        candidate: Annotated[
            str | None, Field(description="the same as `source`, under the name verify and profile use")
        ] = None,
        arch: Annotated[str | None, Field(description="e.g. sm_90a; default: the local GPU's, else sm_90a")] = None,
        problem: Annotated[
            str | None,
            Field(
                description="the reference problem (text or path): kernels are then compiled for the exact "
                "argument types and constexprs of a real forward, instead of types inferred from the source"
            ),
        ] = None,
        emit_ptx: Annotated[bool, Field(description="include each kernel's PTX in the result")] = False,
        timeout_s: Annotated[float, Field(gt=0, le=3600)] = 300.0,
        wait_s: Annotated[float, Field(ge=0, description="return a job_id if not done by then")] = DEFAULT_WAIT_S,
    ) -> CompileReport:
        """Compile a candidate's kernels for a GPU arch without running them (no GPU needed).
        Returns ok, diagnostics pointing at lines of the submitted source, and per-kernel
        registers, spills and shared memory."""
        code = candidate_argument(source, candidate)

        def work(progress, cancel):
            return app.engine.compile(
                target,
                code,
                arch=arch,
                problem=problem,
                emit_ptx=emit_ptx,
                timeout_s=timeout_s,
                on_progress=progress,
                cancel=cancel,
            )

        result = await run_tool_job(
            app,
            "compile",
            work,
            wait_s,
            ctx,
            lambda job: CompileReport(ok=False, target=target, status="running", job_id=job.id),
        )
        if not result.ptx:
            return result
        files = {file_name(kernel, ".ptx"): text for kernel, text in result.ptx.items()}
        files |= {file_name(kernel, ".sass"): text for kernel, text in (result.sass or {}).items()}
        links = await anyio.to_thread.run_sync(keep, app.engine.home, files, "PTX or SASS of a kernel")
        # also as files a host can open
        # annotated with the output schema: the SDK passes the CallToolResult through
        return with_artifacts(result, links)  # type: ignore[return-value]


def candidate_argument(source: str | None, candidate: str | None) -> str:
    """compile's code under either name: `source`, or `candidate` as verify and profile call it."""
    if source is not None and candidate is not None and source != candidate:
        raise ToolError("give the code as `source` or as `candidate`, not both")
    code = source if source is not None else candidate
    if code is None:
        raise ToolError("compile needs the candidate: `source` (or `candidate`), source text or a path to a .py file")
    return code
