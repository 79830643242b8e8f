"""A picture of one loop run: speedup and verdict per attempt (a PNG drawn with matplotlib) and an
HTML page (Jinja2, the PNG inlined as a data URI so the page is one self-contained file) with the
attempts and the best kernel's source. Every run writes one at its end, under
<KFORGE_HOME>/reports/<run_id>/; ``kforge report RUN_ID`` and ``kforge_mcp.write_report`` redraw it."""

from __future__ import annotations

import base64
import io
import time
from pathlib import Path

import jinja2
from pydantic import BaseModel, Field

from kforge_mcp.advice.drawing import one_at_a_time
from kforge_mcp.store import RunStore

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
COLORS = {
    "pass": "#2e7d32",
    "fail": "#ef6c00",
    "suspicious": "#8e24aa",
    "error": "#c62828",
    "compile_error": "#616161",
    "no_code": "#bdbdbd",
}


class ReportFiles(BaseModel):
    run_id: str
    html: str = Field(description="the page: plot, attempts, best kernel source")
    png: str = Field(description="the plot alone")
    uri: str = Field(description="the same page as an MCP resource")


def report_dir(store: RunStore, run_id: str) -> Path:
    return store.path.parent / "reports" / run_id


@one_at_a_time
def plot(run, summaries, best_index: int | None) -> bytes:
    # Figure without pyplot: the Agg canvas, no global backend state (mathtext is shared: one_at_a_time)
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    fig = Figure(figsize=(8, 3.6), layout="constrained")
    ax = fig.subplots()
    timed = [s.speedup for s in summaries if s.speedup]
    # a log scale, bars growing from 1x, when speedups span decades (an interpreter run, a naive first try)
    log = bool(timed) and (min(timed) < 0.1 or max(timed) / min(timed) > 30)
    top = max(timed + [1.2])
    floor = min(timed + [0.8]) / 2 if log else 0
    for s in summaries:
        color = COLORS.get(s.verdict or "", "#9e9e9e")
        best = s.index == best_index
        if s.speedup:
            base = 1.0 if log else 0.0
            ax.bar(
                s.index,
                s.speedup - base,
                bottom=base,
                color=color,
                hatch="//" if s.pass_ == "optimize" else None,
                edgecolor="#ffb300" if best else "white",
                linewidth=3 if best else 0.5,
            )
            if best:
                ax.annotate(
                    f"best {s.speedup:.3g}x",
                    (s.index, s.speedup),
                    xytext=(0, 4 if s.speedup >= base else -12),
                    textcoords="offset points",
                    ha="center",
                    fontsize=8,
                    fontweight="bold",
                )
        else:  # nothing to time: a mark on the axis in the verdict's colour
            ax.plot(s.index, floor if log else 0, marker="X", markersize=10, color=color, clip_on=False, zorder=3)
    ax.axhline(1.0, color="#424242", linestyle="--", linewidth=0.8)
    ax.set_xlim(-0.7, max(len(summaries), 1) - 0.3)
    if log:
        ax.set_yscale("log")
        ax.set_ylim(floor, top * 2)
    else:
        ax.set_ylim(0, top * 1.15)
    ax.set_xticks(range(len(summaries)))
    ax.set_xlabel("attempt")
    ax.set_ylabel("speedup over baseline (x" + (", log)" if log else ")"))
    name = Path(run.problem_name).name if run.problem_name else "problem"  # a path would not fit the title
    ax.set_title(f"run {run.id}: {name} on {run.target} ({run.status})", fontsize=10)
    seen = [v for v in COLORS if any(s.verdict == v for s in summaries)]
    handles = [Patch(color=COLORS[v], label=v) for v in seen]
    handles += [
        Patch(facecolor="white", edgecolor="#424242", hatch="//", label="optimize pass"),
        Patch(facecolor="white", edgecolor="#ffb300", linewidth=2, label="best"),
    ]
    ax.legend(handles=handles, fontsize=7, loc="upper left", ncols=2, frameon=False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def render(store: RunStore, run_id: str) -> tuple[str, bytes]:
    """(HTML page, PNG) of a run."""
    from kforge_mcp.agents.results import best_of, summarize

    run = store.get_run(run_id)  # an id or a unique prefix of one
    attempts = store.attempts(run.id)
    summaries = [summarize(a) for a in attempts]
    best = best_of(attempts)
    png = plot(run, summaries, best.index if best else None)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=jinja2.StrictUndefined
    )
    when = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))  # noqa: E731
    html = env.get_template("run_report.html.j2").render(
        run=run,
        attempts=summaries,
        best=best,
        created=when(run.created),
        updated=when(run.updated),
        png_b64=base64.b64encode(png).decode("ascii"),
        colors=COLORS,
        baseline=(best.verify_report or {}).get("speedup_over") if best else None,
    )
    return html, png


def write_report(store: RunStore, run_id: str, out: Path | str | None = None) -> ReportFiles:
    run_id = store.resolve_id(run_id)  # an id or a unique prefix of one
    html, png = render(store, run_id)
    folder = (Path(out).expanduser() if out else report_dir(store, run_id)).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.png").write_bytes(png)
    (folder / "report.html").write_text(html)
    return ReportFiles(
        run_id=run_id,
        html=str(folder / "report.html"),
        png=str(folder / "report.png"),
        uri=f"kforge://runs/{run_id}/report",
    )
