"""The streamable HTTP transport of ``kforge-mcp``: the SDK's app (Host / Origin validation,
request-size limit) wrapped in an optional bearer-token check, served by uvicorn.

A token is required whenever the server listens on a non-loopback address: it runs
submitted code, so anyone who can reach the port must prove they may."""

from __future__ import annotations

import hmac
import json

TOKEN_ENV = "KFORGE_HTTP_TOKEN"
DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024


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


def build_app(
    server, host: str, transport_security, token: str | None = None, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
):
    """The ASGI app: the MCP endpoint at /mcp, with auth when a token is given."""
    app = server.streamable_http_app(
        transport_security=transport_security, host=host, max_request_body_size=max_request_bytes
    )
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
