"""MCP tools: one file per tool, each a thin adapter over the engine in kforge_mcp.api."""
