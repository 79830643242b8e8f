"""Results a host can show: a tool's structured result as before (and its JSON as text), plus
resource links to the artifacts it made and an image of its plot where one exists."""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import anyio
from mcp_types import CallToolResult, ImageContent, ResourceLink, TextContent
from pydantic import BaseModel

from kforge_mcp.store import RunStore

logger = logging.getLogger("kforge_mcp.server")
MAX_IMAGE_BYTES = 512 * 1024  # a plot, not a photo: past this the link to the report is enough


def with_artifacts(
    report: BaseModel, links: list[ResourceLink], image: Path | None = None
) -> BaseModel | CallToolResult:
    """``report`` unchanged when there is nothing to add; else the same structured content and
    text, then the links and the image."""
    png = image.read_bytes() if image is not None and image.is_file() else None
    if png is not None and len(png) > MAX_IMAGE_BYTES:
        png = None
    if not links and png is None:
        return report
    structured = report.model_dump(mode="json", by_alias=True)
    content: list[TextContent | ResourceLink | ImageContent] = [
        TextContent(type="text", text=report.model_dump_json(indent=2, by_alias=True))
    ]
    content += links
    if png is not None:
        content.append(ImageContent(type="image", data=base64.b64encode(png).decode(), mime_type="image/png"))
    return CallToolResult(content=content, structured_content=structured)


async def run_links(result: BaseModel, home: Path) -> BaseModel | CallToolResult:
    """A loop result (run_loop, loop_submit): links to its run, its best candidate and, once the run
    is over, its report, with the report's plot (speedup and verdict per attempt) as an image when it
    has been drawn. A job still running comes back as is."""
    run_id = getattr(result, "run_id", None)
    if not run_id or getattr(result, "job_id", None):
        return result
    base = f"kforge://runs/{run_id}"
    links = [link(base, f"run {run_id}", "application/json", "every attempt: replies, reports, advice")]
    if getattr(result, "best", None) is not None:
        links.append(link(f"{base}/best", "best candidate", "text/x-python", "the best correct candidate, by speedup"))
    over = getattr(result, "report", None) or getattr(result, "done", False)
    png = None
    if over:
        links.append(link(f"{base}/report", "run report", "text/html", "speedup and verdict per attempt"))
        png = Path(home) / "reports" / run_id / "report.png"
        if await anyio.to_thread.run_sync(stale, home, run_id, png):  # draw it now, as run_loop's runs are
            await anyio.to_thread.run_sync(draw_report, home, run_id)
    return with_artifacts(result, links, png)


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


async def profile_image(result: BaseModel, links: list[ResourceLink]) -> BaseModel | CallToolResult:
    """A profile: the same result, plus links to its raw files and its roofline drawn as an image."""
    roof = getattr(result, "roofline", None)
    if roof is None or getattr(result, "job_id", None):
        return with_artifacts(result, links)
    import tempfile

    from kforge_mcp.advice.roofline_plot import draw_roofline

    with tempfile.TemporaryDirectory(prefix="kforge-roofline-") as tmp:
        try:
            png = await anyio.to_thread.run_sync(draw_roofline, roof, Path(tmp) / "roofline.png")
        except Exception as e:  # noqa: BLE001  (no plot is no reason to lose the result)
            logger.warning("could not draw the roofline: %s: %s", type(e).__name__, e)
            png = None
        return with_artifacts(result, links, png)
