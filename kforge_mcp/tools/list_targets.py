"""list_targets: every target, whether it works here and why not, devices and versions."""

from __future__ import annotations

from typing import Annotated

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult
from pydantic import Field

from kforge_mcp.core.schemas import TargetsReport
from kforge_mcp.targets import TARGETS
from kforge_mcp.tools.common import READ_ONLY, App
from kforge_mcp.tools.links import result


def register(mcp: MCPServer, app: App) -> None:
    @mcp.tool(
        annotations=READ_ONLY,
        description=f"List the kernel targets ({', '.join(TARGETS)}): which are available on this machine, why "
        "not when they are not, the devices each can run on and toolchain versions.",
    )
    async def list_targets(
        refresh: Annotated[bool, Field(description="probe again instead of answering from the last probe")] = False,
    ) -> Annotated[CallToolResult, TargetsReport]:
        return result(await anyio.to_thread.run_sync(lambda: app.engine.list_targets(refresh=refresh)))
