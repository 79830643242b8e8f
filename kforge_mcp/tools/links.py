"""Results a host can show: a tool's report as structured content, its summary as the text a model
reads (summaries.py), resource links to the artifacts it made and an image of its plot where one exists."""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence
from pathlib import Path

import anyio
from mcp_types import CallToolResult, ImageContent, ResourceLink, TextContent
from pydantic import BaseModel

from kforge_mcp.store import RunStore
from kforge_mcp.tools.summaries import summary

logger = logging.getLogger("kforge_mcp.server")
MAX_IMAGE_BYTES = 512 * 1024  # a plot, not a photo: past this the link to the report is enough


def result(report: BaseModel, links: Sequence[ResourceLink] = (), image: Path | None = None) -> CallToolResult:
    """The call's result: ``report`` whole as structured content, its summary as text, then the links and
    the image (a plot, left out past MAX_IMAGE_BYTES: the links reach the same report)."""
    png = image.read_bytes() if image is not None and image.is_file() else None
    if png is not None and len(png) > MAX_IMAGE_BYTES:
        png = None
    structured = report.model_dump(mode="json", by_alias=True)
    content: list[TextContent | ResourceLink | ImageContent] = [TextContent(type="text", text=summary(report))]
    content += links
    if png is not None:
        content.append(ImageContent(type="image", data=base64.b64encode(png).decode(), mime_type="image/png"))
    return CallToolResult(content=content, structured_content=structured)


async def run_links(report: BaseModel, home: Path) -> CallToolResult:
    """A loop result (run_loop, loop_submit): links to its run, its best candidate and, once the run
    is over, its report, with the report's plot (speedup and verdict per attempt) as an image when it
    has been drawn. A job still running comes back as is."""
    run_id = getattr(report, "run_id", None)
    if not run_id or getattr(report, "job_id", None):
        return result(report)
    base = f"kforge://runs/{run_id}"
    links = [link(base, f"run {run_id}", "application/json", "every attempt: replies, reports, advice")]
    if getattr(report, "best", None) is not None:
        links.append(link(f"{base}/best", "best candidate", "text/x-python", "the best correct candidate, by speedup"))
    over = getattr(report, "report", None) or getattr(report, "done", False)
    png = None
    if over:
        links.append(link(f"{base}/report", "run report", "text/html", "speedup and verdict per attempt"))
        png = Path(home) / "reports" / run_id / "report.png"
        if await anyio.to_thread.run_sync(stale, home, run_id, png):  # draw it now, as run_loop's runs are
            await anyio.to_thread.run_sync(draw_report, home, run_id)
    return result(report, links, png)


def stale(home: Path, run_id: str, png: Path) -> bool:
    """No plot yet, or one drawn before the run's last change (its report read while it ran)."""
    return not png.is_file() or png.stat().st_mtime < RunStore.for_home(home).get_run(run_id).updated


def draw_report(home: Path, run_id: str) -> None:
    from kforge_mcp.agents.report import write_report

    try:
        write_report(RunStore.for_home(home), run_id)
    except Exception as e:  # noqa: BLE001  (no plot is no reason to lose the result)
        logger.warning("could not draw the report of run %s: %s: %s", run_id, type(e).__name__, e)


def link(uri: str, name: str, mime_type: str, description: str) -> ResourceLink:
    return ResourceLink(type="resource_link", uri=uri, name=name, mime_type=mime_type, description=description)


async def profile_image(report: BaseModel, links: list[ResourceLink]) -> CallToolResult:
    """A profile: its result, plus links to its raw files and its roofline drawn as an image."""
    roof = getattr(report, "roofline", None)
    if roof is None or getattr(report, "job_id", None):
        return result(report, links)
    import tempfile

    from kforge_mcp.advice.roofline_plot import draw_roofline

    with tempfile.TemporaryDirectory(prefix="kforge-roofline-") as tmp:
        try:
            png = await anyio.to_thread.run_sync(draw_roofline, roof, Path(tmp) / "roofline.png")
        except Exception as e:  # noqa: BLE001  (no plot is no reason to lose the result)
            logger.warning("could not draw the roofline: %s: %s", type(e).__name__, e)
            png = None
        return result(report, links, png)
