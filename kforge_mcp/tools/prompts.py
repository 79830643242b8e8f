"""MCP prompts: the generation agent's prompts (first attempt, repair, optimize) for a client
that drives its own model, rendered from prompts/<target>/*.j2."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from kforge_mcp.agents import prompts
from kforge_mcp.agents.loop import resolve
from kforge_mcp.tools.common import App


def register(mcp: MCPServer, app: App) -> None:
    def problem_text(problem: str) -> str:
        return resolve(app.engine, problem, "problem").text

    @mcp.prompt()
    def write_kernel(
        problem: Annotated[str, Field(description="reference in KernelBench form: text or a .py path")],
        target: Annotated[str, Field(description="triton or cuda")] = "triton",
    ) -> str:
        """Write a first kernel for a PyTorch reference: the target's rules, a worked example, the output format."""
        return prompts.render("first", target, problem_text(problem))

    @mcp.prompt()
    def repair_kernel(
        problem: Annotated[str, Field(description="reference in KernelBench form: text or a .py path")],
        candidate: Annotated[str, Field(description="the candidate that failed (source text)")],
        feedback: Annotated[str, Field(description="what went wrong: compile diagnostics, errors, mismatches")],
        target: Annotated[str, Field(description="triton or cuda")] = "triton",
    ) -> str:
        """Fix a candidate from its compile / verify feedback."""
        return prompts.render("repair", target, problem_text(problem), previous=candidate, feedback=feedback)

    @mcp.prompt()
    def optimize_kernel(
        problem: Annotated[str, Field(description="reference in KernelBench form: text or a .py path")],
        candidate: Annotated[str, Field(description="the correct candidate to speed up (source text)")],
        feedback: Annotated[str, Field(description="measurements and analyze_profile recommendations")],
        target: Annotated[str, Field(description="triton or cuda")] = "triton",
    ) -> str:
        """Make a correct candidate faster from its profile and the analysis agent's advice."""
        return prompts.render("optimize", target, problem_text(problem), previous=candidate, feedback=feedback)
