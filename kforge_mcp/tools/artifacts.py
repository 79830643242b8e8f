"""Files a tool made that a host may want whole: a kernel's PTX from ``compile``, the profilers' own
output from ``profile`` (torch.profiler's chrome trace, Nsight Compute's raw CSV), a suite's report
from ``bench`` (summary.json, bench.html). Each is kept under
<home>/artifacts/<digest>/<name> (content-addressed: the same file is kept once), linked from the
result and read back as kforge://artifacts/{digest}/{name}."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp_types import ResourceLink

from kforge_mcp.tools.common import App, logger
from kforge_mcp.tools.links import link

KEEP = 512  # artifact folders kept; the oldest go first
MIME = {".ptx": "text/plain", ".json": "application/json", ".csv": "text/csv", ".html": "text/html"}
DIGEST = re.compile(r"^[0-9a-f]{16}$")
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def folder(home: Path) -> Path:
    return Path(home) / "artifacts"


def file_name(name: str, suffix: str) -> str:
    """A kernel name ('k [BLOCK=64, warps=4]') as a safe file name."""
    return (re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_.")[:100] or "kernel") + suffix


def keep(home: Path, files: dict[str, str], what: str) -> list[ResourceLink]:
    """Store ``files`` (name -> text) and link each; ``what`` says what they are."""
    links = []
    for name, text in files.items():
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        path = folder(home) / digest / name
        try:
            if not path.is_file():
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(path.suffix + ".tmp")
                tmp.write_text(text)
                tmp.replace(path)  # a reader never sees half a file
        except OSError as e:  # an unwritable home costs the link, not the result
            logger.warning("could not keep %s: %s", name, e)
            continue
        mime = MIME.get(path.suffix, "text/plain")
        links.append(link(f"kforge://artifacts/{digest}/{name}", name, mime, f"{what}: {name}"))
    prune(folder(home))
    return links


def prune(root: Path) -> None:
    kept = sorted(root.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True) if root.is_dir() else []
    for old in kept[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)


def register(mcp: MCPServer, app: App) -> None:
    @mcp.resource("kforge://artifacts/{digest}/{name}", name="artifact", mime_type="text/plain")
    def artifact(digest: str, name: str) -> str:
        """A file a tool made: a kernel's PTX, a chrome trace, an Nsight Compute CSV (see the tool's links)."""
        path = folder(app.engine.home) / digest / name
        if not (DIGEST.match(digest) and NAME.match(name) and path.is_file()):  # no path leaves the folder
            raise ResourceNotFoundError(f"no artifact {digest}/{name} (kept: the newest {KEEP})")
        return path.read_text()
