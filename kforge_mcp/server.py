"""The MCP server ``kforge``: tools from kforge_mcp/tools, over stdio or streamable HTTP."""

from __future__ import annotations

import inspect

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST, METHOD_NOT_FOUND, ToolExecution
from pydantic import ValidationError

from kforge_mcp import __version__
from kforge_mcp.api import Engine
from kforge_mcp.tools import (
    analyze_profile,
    app_view,
    artifacts,
    bench,
    completions,
    jobs,
    list_targets,
    loop,
    profile,
    prompts,
    run_watch,
    runs,
    tasks,
    verify,
    verify_batch,
)
from kforge_mcp.tools import compile as compile_tool
from kforge_mcp.tools.common import App, invalid_params, logger
from kforge_mcp.tools.schemas import compact_input, compact_output

INSTRUCTIONS = """\
kforge turns a PyTorch reference module into a faster kernel. A problem is KernelBench-form
Python (class Model, get_inputs, get_init_inputs); a candidate defines class ModelNew with the
same constructor and forward, doing its work in kernels of one target. Call list_targets first
to see what runs here; compile gives line-level diagnostics and per-kernel resources without a
GPU; verify checks correctness against the reference and times eager and torch.compile
baselines (verify_batch: many candidates at once, on every worker; bench: a suite of problems scored with fast_p); profile measures kernels and the roofline, and analyze_profile turns a profile (or a captured
ncu / torch.profiler / proton file) into ranked advice. Calls that outlive wait_s return a job_id: poll job_status / job_result
(clients with MCP tasks get a task instead: verify, verify_batch, profile, bench and run_loop; its id is the job id).
run_loop runs the whole generate / repair / optimize loop with your model via sampling; without sampling, drive it
with loop_start and loop_submit. Runs are resources: kforge://runs, kforge://runs/{run_id}, kforge://runs/{run_id}/best, kforge://runs/{run_id}/report (HTML), kforge://runs/{run_id}/report.png;
subscribe to one (resources/subscribe, or subscriptions/listen) to hear when the run changes."""

TOOL_MODULES = (
    list_targets,
    compile_tool,
    verify,
    jobs,
    profile,
    analyze_profile,
    loop,
    prompts,
    runs,
    verify_batch,
    bench,
    completions,
    run_watch,
    artifacts,
)


async def log_refusals(ctx, call_next):
    """One WARNING line for a request the spec refuses before any handler runs: an unknown method
    (-32601) or params of the wrong shape (-32602). The client gets the SDK's error unchanged."""
    try:
        return await call_next(ctx)
    except MCPError as e:
        if e.error.code in (METHOD_NOT_FOUND, INVALID_REQUEST):
            logger.warning("%s refused: %s (%d)", ctx.method, e.error.message, e.error.code)
        raise
    except ValidationError as e:
        fields = sorted({".".join(map(str, err["loc"])) for err in e.errors()})
        logger.warning("%s refused: invalid params %s", ctx.method, fields)
        raise


class KforgeServer(MCPServer):
    kforge_app: App  # set by build_server: the CLI and tests reach the engine through it
    _listed: list | None = None  # the tools as published: they do not change once the server is built

    async def list_tools(self):
        if self._listed is None:
            tools = await super().list_tools()
            for tool in tools:
                tool.description = inspect.cleandoc(tool.description or "")  # a docstring, less its indentation
                tool.input_schema = compact_input(tool.input_schema)  # every session loads these (tools/schemas.py)
                tool.output_schema = compact_output(tool.output_schema)
                if tool.name in tasks.TASK_TOOLS:  # 2025-11-25 tool-level task negotiation (tools/tasks.py)
                    tool.execution = ToolExecution(task_support="optional")
            self._listed = tools
        return self._listed

    async def get_prompt(self, name, arguments=None, context=None):
        if name not in {p.name for p in await self.list_prompts()}:
            raise invalid_params(f"Unknown prompt: {name}")
        return await super().get_prompt(name, arguments, context)

    async def read_resource(self, uri, context=None):
        try:
            return await super().read_resource(uri, context)
        except ResourceNotFoundError as e:  # no such URI, or no such run (tools/runs.py)
            raise invalid_params(str(e)) from None


def build_server(engine: Engine | None = None) -> MCPServer:
    app = App(engine=engine or Engine(), bus=run_watch.ListenerCount())
    task_table = tasks.Tasks(app)
    mcp = KforgeServer(
        "kforge",
        instructions=INSTRUCTIONS,
        version=__version__,
        subscriptions=app.bus,
        lifespan=app.lifespan,
        # MCP Apps: the ui://kforge/run view of a loop run; Tasks: long calls as tasks (tools/tasks.py)
        extensions=[app_view.extension(), task_table],
    )
    mcp.middleware.extend([log_refusals, task_table.middleware])
    for module in TOOL_MODULES:
        module.register(mcp, app)
    mcp.kforge_app = app  # the CLI and tests reach the engine through this
    return mcp
