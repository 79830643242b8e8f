"""``kforge targets``, ``compile``, ``verify``, ``verify-batch``, ``profile`` and ``analyze``: each
opens an engine, runs one call under a spinner and prints its report."""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from kforge_mcp.cli.console import (
    EXIT_NOT_OK,
    EXIT_OK,
    VERDICT_STYLE,
    Col,
    err,
    fitted_table,
    open_engine,
    out,
    print_json,
    with_status,
)
from kforge_mcp.cli.options import given
from kforge_mcp.cli.reports import (
    print_analysis,
    print_batch,
    print_compile,
    print_profile,
    print_verify,
    write_assembly,
)
from kforge_mcp.core.errors import InputError
from kforge_mcp.core.schemas import VerifyBatchReport, summarize_batch
from kforge_mcp.profiling.report import AnalysisReport, ProfileReport


def cmd_targets(args) -> int:
    with open_engine(args.home, args=args) as engine:
        report = with_status("probing targets", lambda p: engine.list_targets(refresh=args.refresh, on_progress=p))
    if args.json:
        print_json(report)
        return EXIT_OK
    cols = [Col("target"), Col("available"), Col("devices", max_width=30), Col("versions")]
    rows = [
        [
            t.name,
            Text("yes", style="green") if t.available else Text("no", style="red"),
            ", ".join(t.devices) or "-",
            "\n".join(f"{k} {v}" for k, v in t.versions.items()) or "-",
        ]
        for t in report.targets
    ]
    out.print(fitted_table(cols, rows, title="kforge targets"))
    for t in report.targets:  # reasons and notes below the table, at the terminal's full width
        out.print(Text.assemble(Text(t.name, style="bold"), ": ", Text(t.reason or "available", style="yellow")))
        for note in t.notes:
            out.print(Padding(Text(note, style="dim"), (0, 0, 0, 2)))
    host = Table.grid(padding=(0, 2))
    for key, value in report.host.items():
        host.add_row(Text(key, style="bold"), Text(value))
    out.print(Text("host", style="bold underline"), host)
    for n in report.nodes:  # a cluster executor's nodes, one line each
        offers = f"{', '.join(n.targets) or 'no target'} on {', '.join(n.devices) or 'no device'}"
        out.print(Text(f"node {n.address} ({n.node_id[:12]}): ", style="bold"), n.error or offers, soft_wrap=True)
    return EXIT_OK


def cmd_compile(args) -> int:
    if args.file and args.candidate and args.file != args.candidate:
        raise InputError("give the candidate once: as the argument or as --candidate")
    candidate = args.file or args.candidate
    if not candidate:
        raise InputError("compile needs the candidate: kforge compile CANDIDATE.py --target ...")
    emit = args.ptx or bool(args.out)
    with open_engine(args.home) as engine:
        report = with_status(
            f"compiling {candidate}",
            lambda p: engine.compile(args.target, candidate, emit_ptx=emit, on_progress=p, **given(args)),
        )
    written = write_assembly(report, args.out) if args.out else []
    if args.json:
        print_json(report)
        for line in written:
            err.print(Text(line, style="dim"), soft_wrap=True)
    else:
        print_compile(report, candidate, written)
    return EXIT_OK if report.ok else EXIT_NOT_OK


def cmd_verify(args) -> int:
    with open_engine(args.home, args=args) as engine:
        report = with_status(
            "verifying",
            lambda p: engine.verify(args.problem, args.candidate, args.target, on_progress=p, **given(args)),
        )
    if args.json:
        print_json(report)
    else:
        print_verify(report, args.candidate)
    return EXIT_OK if report.verdict == "pass" else EXIT_NOT_OK


def cmd_verify_batch(args) -> int:
    items = [{"problem": args.problem, "candidate": c} for c in args.candidates]
    n, done = len(items), [0]
    with open_engine(args.home, args=args) as engine:
        with err.status(Text(f"verifying {n} candidates")) as status:

            def on_result(i: int, r) -> None:  # one line per candidate as it finishes
                done[0] += 1
                status.update(Text(f"verified {done[0]}/{n}"))
                if not args.json:
                    err.print(
                        Text.assemble(
                            f"[{done[0]}/{n}] ",
                            Text(f"{r.verdict:<10}", style=VERDICT_STYLE.get(r.verdict, "bold")),
                            f" {args.candidates[i]}",
                            f"  {r.speedup:.3g}x" if r.speedup else "",
                        )
                    )

            started = time.perf_counter()
            reports = engine.verify_batch(items, on_result=on_result, target=args.target, **given(args))
    report = VerifyBatchReport(reports=reports, summary=summarize_batch(reports, time.perf_counter() - started))
    if args.json:
        print_json(report)
    else:
        print_batch(report, args.candidates)
    return EXIT_OK if all(r.verdict == "pass" for r in reports) else EXIT_NOT_OK


def cmd_profile(args) -> int:
    with open_engine(args.home) as engine:
        report = with_status(
            "profiling",
            lambda p: engine.profile(args.problem, args.candidate, args.target, on_progress=p, **given(args)),
        )
        analysis = engine.analyze_profile(profile=report.model_dump()) if args.advise and not report.errors else None
    if args.json and analysis is not None:  # both reports, so --advise keeps its recommendations
        print_json(ProfileWithAnalysis(profile=report, analysis=analysis))
    elif args.json:
        print_json(report)
    else:
        print_profile(report)
        if analysis is not None:
            print_analysis(analysis, printed_notes=report.notes)
    return EXIT_NOT_OK if report.errors else EXIT_OK


class ProfileWithAnalysis(BaseModel):
    """``kforge profile --advise --json``: the profile and the analysis agent's report on it."""

    profile: ProfileReport
    analysis: AnalysisReport


def cmd_analyze(args) -> int:
    with open_engine(args.home) as engine:
        image = (
            args.file if Path(args.file).suffix.lower() in (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp") else None
        )
        report = with_status(
            f"analyzing {args.file}",
            lambda p: engine.analyze_profile(path=None if image else args.file, image=image, **given(args)),
        )
    if args.json:
        print_json(report)
    else:
        print_analysis(report)
    return EXIT_OK
