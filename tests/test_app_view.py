"""The MCP Apps view (ui://kforge/run) through the SDK's real client: the capability is advertised,
the loop tools point at the view, the page is one self-contained file served with the Apps MIME type,
and a bad ui:// URI or run id gets -32602. tests/test_app_browser.py renders it in chromium."""

from __future__ import annotations

import re

import pytest
from mcp import Client
from mcp.client.extension import advertise
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from kforge_mcp.tools.app_view import RUN_VIEW

pytestmark = pytest.mark.anyio
UI = "io.modelcontextprotocol/ui"
APP_MIME = "text/html;profile=mcp-app"
LOOP_TOOLS = {"run_loop", "loop_start", "loop_submit"}


async def test_the_server_offers_the_run_view_to_apps_hosts(server):
    host = advertise(UI, {"mimeTypes": [APP_MIME]})
    async with Client(server, extensions=[host]) as client:
        assert UI in (client.server_capabilities.extensions or {}), client.server_capabilities
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name in LOOP_TOOLS:
            assert (tools[name].meta or {}).get("ui", {}).get("resourceUri") == RUN_VIEW, tools[name].meta
        assert not [n for n, t in tools.items() if n not in LOOP_TOOLS and "ui" in (t.meta or {})]
        listed = {str(r.uri): r for r in (await client.list_resources()).resources}
        assert listed[RUN_VIEW].mime_type == APP_MIME
        page = (await client.read_resource(RUN_VIEW)).contents[0]
    assert page.mime_type == APP_MIME
    html = page.text
    assert html.startswith("<!doctype html>") and "ui/initialize" in html and "resources/read" in html
    # self-contained: hosts sandbox the page and CI has no network, so nothing is fetched from outside
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//|@import|https?://""", html), "external reference"


async def test_a_host_without_apps_sees_the_same_results(server):
    async with Client(server) as client:  # no extension advertised: the loop tools answer as before
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert LOOP_TOOLS <= tools.keys()
        assert "run_id" in tools["loop_start"].output_schema["properties"]


@pytest.mark.parametrize(
    "uri", ["ui://kforge/nope", "kforge://runs/no-such-run/report.png", "kforge://runs/no-such-run/roofline.png"]
)
async def test_an_unknown_view_or_run_is_invalid_params(server, uri):
    async with Client(server) as client:
        with pytest.raises(MCPError) as e:
            await client.read_resource(uri)
    assert e.value.error.code == INVALID_PARAMS, e.value.error
