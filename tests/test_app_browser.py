"""The MCP Apps view in a real headless chromium: a minimal host page (tests/apps_host.html) renders
ui://kforge/run in a sandboxed iframe and forwards the view's requests, through the SDK's client, to
a real kforge server over stdio. The host calls loop_start; this test submits a wrong then a right
Triton candidate (CPU interpreter) while the view is open, and the view must show each attempt's
verdict and speedup as it lands, the advice, the roofline and the plot. A screenshot goes to the test's
folder, or to $KFORGE_SCREENSHOT (bench/results/apps-run-view/cpu.png was taken so) so CI leaves no tracked file
changed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import anyio
import pytest
from conftest import ROOT, example, problem
from mcp import Client, StdioServerParameters
from mcp.client.extension import advertise
from mcp.shared.exceptions import MCPError

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
HOST_PAGE = Path(__file__).resolve().parent / "apps_host.html"
LOOP = {"target": "triton", "max_iterations": 2, "trials": 1, "baselines": ["eager"], "timing_budget_s": 0.2}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def host_app(client: Client):
    """The host's back end: the page's /mcp requests go to the kforge server through the SDK client."""
    from starlette.applications import Starlette
    from starlette.responses import FileResponse, JSONResponse
    from starlette.routing import Route

    async def forward(request):
        body = json.loads(await request.body())
        method, params = body["method"], body.get("params") or {}
        try:
            if method == "tools/list":
                result = await client.list_tools()
            elif method == "tools/call":
                result = await client.call_tool(params["name"], params.get("arguments") or {})
            elif method == "resources/read":
                result = await client.read_resource(params["uri"])
            else:
                return JSONResponse({"error": {"code": -32601, "message": f"not forwarded: {method}"}})
        except MCPError as e:
            return JSONResponse({"error": {"code": e.error.code, "message": e.error.message}})
        return JSONResponse({"result": result.model_dump(mode="json", by_alias=True, exclude_none=True)})

    return Starlette(routes=[Route("/", lambda r: FileResponse(HOST_PAGE)), Route("/mcp", forward, methods=["POST"])])


async def until(check, what: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while not (value := await check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"the view never showed {what}")
        await anyio.sleep(0.25)
    return value


async def test_the_run_view_shows_a_run_live_in_chromium(tmp_path):
    screenshot = Path(os.environ.get("KFORGE_SCREENSHOT") or tmp_path / "apps-run-view.png")
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (.ci/run installs Debian's chromium; apt-get install -y chromium)")
    playwright = pytest.importorskip("playwright.async_api", reason="playwright (the dev extra) drives chromium")
    import uvicorn

    server = StdioServerParameters(
        command=str(Path(sys.executable).parent / "kforge-mcp"),
        args=["--allow-dir", str(ROOT)],
        env={**os.environ, "KFORGE_HOME": str(tmp_path / "home")},
        cwd=str(tmp_path),
    )
    apps_host = advertise("io.modelcontextprotocol/ui", {"mimeTypes": ["text/html;profile=mcp-app"]})
    port = free_port()
    async with Client(server, extensions=[apps_host]) as client, anyio.create_task_group() as tg:
        web = uvicorn.Server(uvicorn.Config(host_app(client), host="127.0.0.1", port=port, log_level="warning"))
        tg.start_soon(web.serve)
        await until(lambda: started(web), "the host's web server", 30)
        async with playwright.async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = await browser.new_page(viewport={"width": 800, "height": 900})
            args = json.dumps({"problem": problem("fused_bias_gelu"), **LOOP})
            await page.goto(f"http://127.0.0.1:{port}/?" + urlencode({"tool": "loop_start", "args": args}))
            view = page.frame_locator("iframe")
            run_id = await until(lambda: text(view, "#run-id", lambda t: not t.startswith("(")), "a run id")
            rows = view.locator("#attempts tbody tr")

            for index, candidate, verdict in ((1, "triton_wrong", "fail"), (2, "triton", "pass")):
                done = await client.call_tool(
                    "loop_submit",
                    {"run_id": run_id, "candidate": example("fused_bias_gelu", candidate), "wait_s": 600},
                )
                assert done.structured_content["verdict"] == verdict, done.content
                # no reload, no new tool result: the view rereads the run through the host
                await until(lambda n=index: count(rows, n), f"attempt {index}")
                row = rows.nth(index - 1)
                assert (await row.locator(".verdict").inner_text()) == verdict
            speedup = done.structured_content["speedup"]
            assert (await rows.nth(1).locator(".speedup").inner_text()) == (
                f"{speedup:#.3g}x" if speedup < 100 else f"{speedup:.0f}x"
            )
            assert "mismatch" in (await rows.nth(0).locator(".problem").inner_text()).lower()
            await until(lambda: text(view, "#status", lambda t: t.startswith("done")), "the run done")

            # the analysis agent's advice on the correct attempt: its summary line, then each recommendation
            advice = done.structured_content["recommendations"]
            summary = next(a["_summary"] for a in advice if "_summary" in a)
            await until(lambda: text(view, "#advice-summary", lambda t: t == summary), "the advice")
            titles = [a["title"] for a in advice if "title" in a]
            assert await view.locator("#advice li b").all_inner_texts() == titles
            # the plot of the finished run (both attempts), not one drawn mid-run
            final = (await client.read_resource(f"kforge://runs/{run_id}/report.png")).contents[0].blob
            await until(lambda: shows(view.locator("#plot"), final), "the final plot")
            assert next(a for a in advice if "_summary" in a)["_roofline"]["sol_ms"] > 0  # and its roofline
            roof = (await client.read_resource(f"kforge://runs/{run_id}/roofline.png")).contents[0].blob
            await until(lambda: shows(view.locator("#roofline"), roof), "the roofline")
            await page.screenshot(path=str(screenshot), full_page=True)
            await browser.close()
        web.should_exit = True
    assert screenshot.read_bytes().startswith(b"\x89PNG")


async def shows(img, png_b64: str) -> bool:
    src = await img.get_attribute("src") or ""
    return src == "data:image/png;base64," + png_b64 and await img.evaluate("img => img.naturalWidth > 0")


async def started(web) -> bool:
    return web.started


async def text(view, selector: str, ok) -> str | None:
    value = await view.locator(selector).inner_text()
    return value if ok(value) else None


async def count(locator, n: int) -> bool:
    return await locator.count() >= n
