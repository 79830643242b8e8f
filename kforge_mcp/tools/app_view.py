"""The MCP Apps view (extension ``io.modelcontextprotocol/ui``, SEP-1865): one ``ui://kforge/run``
page that hosts with Apps render beside a loop tool's result. It shows the run live: each attempt's
verdict and speedup, the analysis agent's advice and the run's plot, read through the host
(``resources/read`` of kforge://runs/{run_id} and its report.png) while the run is running.

The page is one self-contained HTML file (Jinja2, its CSS and JS inline: hosts sandbox it and CI has
no network). Hosts without Apps ignore the tools' ``_meta.ui`` and the resource: results are as before."""

from __future__ import annotations

from pathlib import Path

import jinja2
from mcp.server.apps import Apps

from kforge_mcp import __version__

RUN_VIEW = "ui://kforge/run"
TOOL_META = {"ui": {"resourceUri": RUN_VIEW}}  # on run_loop, loop_start and loop_submit
PROTOCOL_VERSION = "2026-01-26"  # the MCP Apps version the page speaks (ui/initialize)
POLL_MS = 1500  # how often the page rereads a running run
TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def render() -> str:
    from kforge_mcp.agents.report import COLORS

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
    return env.get_template("run_view.html.j2").render(
        version=__version__, protocol=PROTOCOL_VERSION, poll_ms=POLL_MS, colors=COLORS
    )


def extension() -> Apps:
    """The Apps extension: advertises the capability at initialize and serves the page as
    ``text/html;profile=mcp-app``. The loop tools point at it through TOOL_META."""
    apps = Apps()
    apps.add_html_resource(
        RUN_VIEW,
        render(),
        name="run view",
        title="kforge run",
        description="A loop run, live: attempts with verdicts and speedups, the analysis agent's advice, the plot",
        prefers_border=True,
    )
    return apps
