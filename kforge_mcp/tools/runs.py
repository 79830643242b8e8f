"""MCP resources over the run store: kforge://runs, kforge://runs/{run_id}, kforge://runs/{run_id}/best,
kforge://runs/{run_id}/report, its plot kforge://runs/{run_id}/report.png and the roofline of the latest
profiled attempt kforge://runs/{run_id}/roofline.png. At server start, runs whose process died are marked interrupted."""

from __future__ import annotations

import json
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError

from kforge_mcp.agents.loop import summarize
from kforge_mcp.core.errors import InputError, KforgeError
from kforge_mcp.store import RunStore
from kforge_mcp.tools.common import App


def register(mcp: MCPServer, app: App) -> None:
    def store() -> RunStore:
        return RunStore.for_home(app.engine.home)

    def get_run(run_id: str):
        """The run, or not found (-32602): an unknown run_id is the client's mistake, not a crash."""
        try:
            return store().get_run(run_id)
        except InputError as e:
            raise ResourceNotFoundError(str(e)) from None

    try:  # runs left 'running' by a server or CLI that died read as interrupted (resumable)
        store().reap()
    except KforgeError:  # an unwritable home is reported by the calls that need it, not here
        pass

    @mcp.resource("kforge://runs", name="runs", mime_type="application/json")
    def runs() -> str:
        """Loop runs, newest first: id, problem, target, status, best attempt."""
        return json.dumps([r.model_dump(mode="json", exclude={"problem"}) for r in store().list_runs()], indent=1)

    @mcp.resource("kforge://runs/{run_id}", name="run", mime_type="application/json")
    def run(run_id: str) -> str:
        """One run: its options, status and every attempt (pass, verdict, speedup, reports, recommendations)."""
        r = get_run(run_id)
        attempts = store().attempts(r.id)
        return json.dumps(
            {
                **r.model_dump(mode="json"),
                "summary": [summarize(a).model_dump(mode="json", by_alias=True) for a in attempts],
                "attempts": [a.model_dump(mode="json", by_alias=True) for a in attempts],
            },
            indent=1,
        )

    @mcp.resource("kforge://runs/{run_id}/best", name="best candidate", mime_type="text/x-python")
    def best(run_id: str) -> str:
        """The best correct candidate of a run (source text), by speedup."""
        run_id = get_run(run_id).id  # the full id of a unique prefix
        a = store().best(run_id)
        if a is None:
            raise ValueError(f"run '{run_id}' has no correct candidate yet")
        assert a.candidate is not None  # a correct attempt was checked from its code
        return a.candidate

    @mcp.resource("kforge://runs/{run_id}/report", name="run report", mime_type="text/html")
    def report(run_id: str) -> str:
        """A run as one HTML page: speedup and verdict per attempt (an inline PNG) and the best kernel's source.
        Also written to <home>/reports/{run_id}/report.html."""
        from kforge_mcp.agents.report import write_report

        run_id = get_run(run_id).id  # the full id of a unique prefix
        return Path(write_report(store(), run_id).html).read_text()

    @mcp.resource("kforge://runs/{run_id}/report.png", name="run plot", mime_type="image/png")
    def report_png(run_id: str) -> bytes:
        """The run report's plot alone: speedup and verdict per attempt (what the Apps view shows).
        Drawn, not written: a read mid-run must not leave a report that the run's end would keep."""
        from kforge_mcp.agents.report import render

        run_id = get_run(run_id).id  # the full id of a unique prefix
        return render(store(), run_id)[1]

    @mcp.resource("kforge://runs/{run_id}/roofline.png", name="run roofline", mime_type="image/png")
    def roofline_png(run_id: str) -> bytes:
        """The roofline of the latest attempt the analysis agent profiled: speed of light and measured forward."""
        import tempfile

        from kforge_mcp.advice.roofline_plot import draw_roofline
        from kforge_mcp.core.schemas import Roofline

        run_id = get_run(run_id).id  # the full id of a unique prefix
        roofs = [
            r["_roofline"] for a in store().attempts(run_id) for r in a.recommendations or [] if r.get("_roofline")
        ]
        with tempfile.TemporaryDirectory(prefix="kforge-roofline-") as tmp:
            png = draw_roofline(Roofline.model_validate(roofs[-1]), Path(tmp) / "roofline.png") if roofs else None
            if png is None:
                raise ValueError(f"run '{run_id}' has no profiled attempt with a roofline yet")
            return png.read_bytes()
