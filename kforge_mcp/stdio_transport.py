"""The stdio transport of ``kforge-mcp``: the SDK's, with the answers JSON-RPC asks for on bad lines.

The SDK drops a line that is not JSON or not a JSON-RPC message without a word, so the host waits
forever; and it takes a line of any size. Here each gets its error (-32700 parse error, -32600
invalid request, also for a line over the request limit) on stdout and one WARNING line on stderr,
and the server reads on."""

from __future__ import annotations

import io
import json
import logging
import os
from typing import Protocol

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError

logger = logging.getLogger("kforge_mcp.server")


def request_id(message):
    """The id of a request we refuse, when it has a usable one (else null, as JSON-RPC says)."""
    value = message.get("id") if isinstance(message, dict) else None
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None


class _Sender(Protocol):
    """The SDK's write stream, as far as CheckedLines uses it."""

    async def send(self, item: SessionMessage, /) -> None: ...


class CheckedLines:
    """stdin's lines, less the bad ones: each of those is answered on the SDK's own write stream
    (so answers never interleave on stdout) once the transport hands it over."""

    def __init__(self, lines, max_bytes: int):
        self.lines, self.max_bytes = lines, max_bytes
        self.out: _Sender | None = None
        self.ready = anyio.Event()

    async def refuse(self, code: int, message: str, rid=None) -> None:
        logger.warning("stdio: %s", message)
        await self.ready.wait()
        assert self.out is not None  # handed over before ready is set
        error = JSONRPCError(jsonrpc="2.0", id=rid, error=ErrorData(code=code, message=message))
        await self.out.send(SessionMessage(error))

    async def __aiter__(self):
        async for line in self.lines:
            if not line.strip():
                continue
            size = len(line.encode())
            if size > self.max_bytes:
                await self.refuse(
                    INVALID_REQUEST,
                    f"request of {size} bytes is over the {self.max_bytes}-byte limit (--max-request-mb)",
                    request_id(_head_id(line)),
                )
                continue
            try:
                message = json.loads(line.strip())
            except ValueError as e:
                await self.refuse(PARSE_ERROR, f"Parse error: {e}")
                continue
            try:
                types.jsonrpc_message_adapter.validate_python(message, by_name=False)
            except ValidationError:
                keys = sorted(message) if isinstance(message, dict) else type(message).__name__
                await self.refuse(
                    INVALID_REQUEST, f"Invalid request: not a JSON-RPC 2.0 message ({keys})", request_id(message)
                )
                continue
            yield line


def _head_id(line: str):
    """An oversize line is not parsed whole: its id, when it is near the start, as SDKs write it."""
    head = line[:200]
    try:
        start = head.index('"id"')
        value = head[start + 4 :].lstrip(" :").split(",", 1)[0].split("}", 1)[0]
        return {"id": json.loads(value)}
    except ValueError:
        return {}


async def run(server, max_request_bytes: int) -> None:
    """Serve ``server`` (an MCPServer) on stdin and stdout, as ``MCPServer.run("stdio")`` does.
    fd 0 then reads /dev/null, so nothing the server starts can take the host's lines."""
    wire = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    text = io.TextIOWrapper(os.fdopen(wire, "rb"), encoding="utf-8", errors="replace")
    lines = CheckedLines(anyio.wrap_file(text), max_request_bytes)
    # stdio_server only iterates its stdin: CheckedLines gives the lines, as an AsyncFile would
    async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
        lines.out = write_stream
        lines.ready.set()
        low = server._lowlevel_server  # what MCPServer.run_stdio_async runs, with our stdin
        await low.run(read_stream, write_stream, low.create_initialization_options())
