"""The streamable HTTP transport of ``kforge-mcp``: the SDK's app (Host / Origin validation,
request-size limit) wrapped in an optional bearer-token check, served by uvicorn.

A token is required whenever the server listens on a non-loopback address: it runs
submitted code, so anyone who can reach the port must prove they may."""

from __future__ import annotations

import hmac
import json
import logging

TOKEN_ENV = "KFORGE_HTTP_TOKEN"
DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
logger = logging.getLogger("kforge_mcp.server")
SERVER_LOGS = (-32601, -32602, -32603)  # errors from past the transport: the server logged them already


class BearerAuth:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer <token>``; a missing
    or wrong one gets 401 before the MCP app sees it. Lifespan events pass through."""

    def __init__(self, app, token: str):
        if not token:
            raise ValueError("an empty token would accept anyone")
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            return await self.app(scope, receive, send)
        body = json.dumps({"error": "unauthorized", "error_description": "missing or wrong bearer token"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="kforge"'),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class LogRefusals:
    """ASGI middleware: one WARNING line for each request the transport refuses (4xx: a malformed
    body, an unknown session, a wrong header), with the JSON-RPC error it got; a body over the size
    limit gets a JSON-RPC error (-32600, naming the limit) instead of the SDK's plain text."""

    def __init__(self, app, max_request_bytes: int):
        self.app, self.max_request_bytes = app, max_request_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, chunks = None, []

        async def watch(message):
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400:
                start = message  # held until the body is known (the 413 body is replaced)
                return
            if start is None or message["type"] != "http.response.body":
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = b"".join(chunks)
            status = start["status"]
            if status == 413:
                limit = f"over the {self.max_request_bytes}-byte request limit (--max-request-mb)"
                error = {"code": -32600, "message": f"Request body too large: {limit}"}
                body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
                start = {
                    **start,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
                }
            try:
                error = json.loads(body)["error"]
                code, reason = error["code"], f"{error['message']} ({error['code']})"
            except (ValueError, KeyError, TypeError):
                code, reason = None, body[:200].decode(errors="replace")
            if code not in SERVER_LOGS or reason.startswith("Validation error"):  # the latter: the transport's
                logger.warning("HTTP %d %s %s refused: %s", status, scope.get("method"), scope.get("path"), reason)
            await send(start)
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, watch)


def build_app(
    server, host: str, transport_security, token: str | None = None, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
):
    """The ASGI app: the MCP endpoint at /mcp, with auth when a token is given."""
    app = server.streamable_http_app(
        transport_security=transport_security, host=host, max_request_body_size=max_request_bytes
    )
    app = LogRefusals(app, max_request_bytes)
    return BearerAuth(app, token) if token else app


def serve(
    server,
    host: str,
    port: int,
    transport_security,
    token: str | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> None:
    import anyio
    import uvicorn

    app = build_app(server, host, transport_security, token, max_request_bytes)
    config = uvicorn.Config(app, host=host, port=port, log_level=server.settings.log_level.lower())
    anyio.run(uvicorn.Server(config).serve)
