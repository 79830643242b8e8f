"""What every ``kforge`` command shares: the consoles (reports to stdout, progress and errors to
stderr), exit codes, styles, a spinner, and opening an engine from the options."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

# Piped or redirected, rich would squeeze a table into 80 columns and wrap every cell: give each row
# the width it needs, in plain ASCII (colour is off there anyway). --json is the form for programs.
PIPED = not sys.stdout.isatty()
out = Console(highlight=False, width=4096 if PIPED else None)


def report_table(**options) -> Table:
    """A report table: rich's look on a terminal, plain ASCII rules when piped."""
    if PIPED:
        options = {"box": box.ASCII, "title_justify": "left", **options}
    return Table(**options)


@dataclass(frozen=True)
class Col:
    """A column of a fitted table. ``drop``: 0 keeps it always; on a narrow terminal the columns with
    the highest ``drop`` go first. Text wraps at words, folds past ``max_width``, and never gets
    narrower than ``min_width``."""

    header: str
    numeric: bool = False
    drop: int = 0
    max_width: int | None = None
    min_width: int | None = None  # text: narrower than this, the table drops columns instead (default: the header)


def fitted_table(cols: list[Col], rows: list[list], **options) -> Table:
    """A report table that fits the terminal: numbers are never wrapped or cut, text wraps or folds,
    and where that is not enough the droppable columns go, named in the caption (--json has them)."""
    keep = list(range(len(cols)))
    while not PIPED and least_width([cols[i] for i in keep], [[r[i] for i in keep] for r in rows]) > out.width:
        droppable = [i for i in keep if cols[i].drop]
        if not droppable:
            break
        keep.remove(max(droppable, key=lambda i: (cols[i].drop, i)))
    table = report_table(**options)
    for i in keep:
        c = cols[i]
        if c.numeric:
            table.add_column(c.header, justify="right", no_wrap=True)
        else:
            table.add_column(c.header, overflow="fold", max_width=c.max_width, min_width=c.min_width or len(c.header))
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    left = [c.header for i, c in enumerate(cols) if i not in keep]
    if left:
        table.caption = f"left out at {out.width} columns: {', '.join(left)} (--json has every column)"
        table.caption_justify = "left"
    return table


def least_width(cols: list[Col], rows: list[list]) -> int:
    """The narrowest a table of these columns can be: numbers at full width, text at its min_width
    (it folds below that), plus rich's padding and rules (3 per column and 1)."""

    def width(cell) -> int:
        text = cell.plain if isinstance(cell, Text) else str(cell)
        return max((cell_len(line) for line in text.splitlines()), default=0)

    total = 1
    for i, c in enumerate(cols):
        if c.numeric:
            total += max([len(c.header)] + [width(r[i]) for r in rows])
        else:
            total += max(c.min_width or 0, len(c.header))
        total += 3
    return total


def heading(text: str) -> None:
    """A section heading: a rule across a terminal; one short line when piped (no 4096-wide rule)."""
    if PIPED:
        out.print(f"--- {text} ---")
    else:
        out.rule(text)


err = Console(stderr=True, highlight=False)

EXIT_OK, EXIT_NOT_OK, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
VERDICT_STYLE = {"pass": "bold green", "fail": "bold red", "suspicious": "bold yellow", "error": "bold red"}
SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow", "note": "bold cyan"}
PRIORITY_STYLE = {"high": "bold red", "medium": "bold yellow", "low": "dim"}


@contextmanager
def open_engine(home: str | None, allow_dirs: Sequence[Path | str] | None = None, args=None) -> Iterator:
    """An engine that reads paths under ``allow_dirs``; by default anywhere: a local command acts
    for the user who typed the paths (``kforge serve`` passes its --allow-dir list)."""
    from kforge_mcp.api import Engine

    allow_dirs = allow_dirs if allow_dirs is not None else [Path(Path.cwd().anchor)]
    engine = Engine(
        home=home,
        allow_dirs=allow_dirs,
        executor=executor_from(args, home) if args else None,
        settings=args.settings if args else None,
    )
    try:
        yield engine
    finally:
        engine.close()  # kills the workers, whatever happened


def executor_from(args, home: str | None):
    """The executor the options (or $KFORGE_EXECUTOR) ask for; None: the engine's local default."""
    name = getattr(args, "executor", None) or args.settings.executor
    cpu_workers = getattr(args, "cpu_workers", None)
    if not name and not cpu_workers:
        return None
    from kforge_mcp.runtime.executor import make_executor

    options = {"accelerator_type": args.ray_accelerator_type} if getattr(args, "ray_accelerator_type", None) else {}
    if name == "ray":
        err.print(
            Text(
                "starting Ray"
                + (
                    f" (cluster {args.ray_address})"
                    if getattr(args, "ray_address", None)
                    else " (a local Ray: no --ray-address)"
                ),
                style="dim",
            )
        )
    return make_executor(
        args.settings,
        name,
        home=home,
        ray_address=getattr(args, "ray_address", None),
        cpu_workers=cpu_workers,
        **options,
    )


def add_executor_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        help="where jobs run: this machine's workers (local, the "
        "default) or a Ray cluster (ray); default $KFORGE_EXECUTOR",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="Ray cluster to join (default $KFORGE_RAY_ADDRESS; none: start a local Ray)",
    )
    p.add_argument(
        "--cpu-workers",
        type=int,
        metavar="N",
        help="workers for CPU-only jobs (compile, the Triton "
        "interpreter): local default $KFORGE_CPU_WORKERS or 2 (the second started when the first is busy); "
        "Ray default half the cluster's CPUs",
    )
    p.add_argument(
        "--ray-accelerator-type",
        metavar="TYPE",
        help="GPU jobs only on Ray nodes with this accelerator type (e.g. H100)",
    )


def add_home_option(p: argparse.ArgumentParser, default=None) -> None:
    p.add_argument(
        "--home",
        default=default,
        metavar="DIR",
        help="engine home: caches, worker state (default $KFORGE_HOME or ~/.kforge)",
    )


def with_status(label: str, call: Callable[[Callable[[str], None]], object]):
    """Run ``call(on_progress)`` under a spinner on stderr fed by the engine's progress lines
    (sent from the engine's worker-monitoring code, possibly on another thread)."""
    with err.status(Text(label)) as status:
        return call(lambda message: status.update(Text(f"{label}: {message}")))


def print_json(report) -> None:
    sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    sys.stdout.flush()


def fmt(value, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def print_diagnostics(diagnostics, fallback_file: str) -> None:
    """``file:line:col: severity: message``, then the source line and a caret, like a compiler."""
    for d in diagnostics:
        where = d.file or fallback_file
        if d.line:
            where += f":{d.line}" + (f":{d.column}" if d.column else "")
        line = Text(f"{where}: ", style="bold")
        line.append(f"{d.severity}: ", style=SEVERITY_STYLE.get(d.severity, "bold"))
        line.append(d.message)
        out.print(line)
        source_line = read_line(d.file or fallback_file, d.line)
        if source_line is not None:
            out.print(Text(source_line), soft_wrap=True)
            if d.column:
                out.print(Text(" " * (d.column - 1) + "^", style="bold green"))


def read_line(path: str, line: int | None) -> str | None:
    try:
        return Path(path).read_text().splitlines()[line - 1] if line and line > 0 else None
    except (OSError, UnicodeDecodeError, IndexError):
        return None


def comma_list(text: str) -> list[str]:
    """'eager, compiled' -> ['eager', 'compiled'] (an option's comma-separated values)."""
    return [b.strip() for b in text.split(",") if b.strip()]
