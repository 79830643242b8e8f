"""``kforge targets``, ``compile``, ``verify``, ``verify-batch``, ``profile`` and ``analyze``: each
opens an engine, runs one call under a spinner and prints its report."""

from __future__ import annotations

import time
from pathlib import Path

from rich.table import Table
from rich.text import Text

from kforge_mcp.cli.console import (
    EXIT_NOT_OK,
    EXIT_OK,
    VERDICT_STYLE,
    err,
    open_engine,
    out,
    print_json,
    report_table,
    with_status,
)
from kforge_mcp.cli.reports import print_analysis, print_batch, print_compile, print_profile, print_verify
from kforge_mcp.core.schemas import VerifyBatchReport, summarize_batch


def cmd_targets(args) -> int:
    with open_engine(args.home, args=args) as engine:
        report = with_status("probing targets", lambda p: engine.list_targets(refresh=args.refresh, on_progress=p))
    if args.json:
        print_json(report)
        return EXIT_OK
    table = report_table(title="kforge targets")
    for column in ("target", "available", "devices", "versions", "reason / notes"):
        table.add_column(column)
    for t in report.targets:
        available = Text("yes", style="green") if t.available else Text("no", style="red")
        versions = "\n".join(f"{k} {v}" for k, v in t.versions.items())
        notes = Text("\n".join(t.notes), style="dim")
        if t.reason:
            notes = Text.assemble(Text(t.reason, style="yellow"), "\n" if t.notes else "", notes)
        table.add_row(t.name, available, ", ".join(t.devices) or "-", versions or "-", notes)
    out.print(table)
    host = Table.grid(padding=(0, 2))
    for key, value in report.host.items():
        host.add_row(Text(key, style="bold"), Text(value))
    out.print(Text("host", style="bold underline"), host)
    for n in report.nodes:  # a cluster executor's nodes, one line each
        offers = f"{', '.join(n.targets) or 'no target'} on {', '.join(n.devices) or 'no device'}"
        out.print(Text(f"node {n.address} ({n.node_id[:12]}): ", style="bold"), n.error or offers, soft_wrap=True)
    return EXIT_OK


def cmd_compile(args) -> int:
    with open_engine(args.home) as engine:
        report = with_status(
            f"compiling {args.file}",
            lambda p: engine.compile(
                args.target, args.file, arch=args.arch, problem=args.problem, emit_ptx=args.ptx, on_progress=p
            ),
        )
    if args.json:
        print_json(report)
    else:
        print_compile(report, args.file)
    return EXIT_OK if report.ok else EXIT_NOT_OK


def cmd_verify(args) -> int:
    with open_engine(args.home, args=args) as engine:
        report = with_status(
            "verifying",
            lambda p: engine.verify(
                args.problem,
                args.candidate,
                target=args.target,
                device=args.device,
                trials=args.trials,
                atol=args.atol,
                rtol=args.rtol,
                timeout_s=args.timeout,
                baselines=args.baselines,
                precision=args.precision,
                seed=args.seed,
                timing_sets=args.timing_sets,
                on_progress=p,
            ),
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
            reports = engine.verify_batch(
                items,
                on_result=on_result,
                target=args.target,
                device=args.device,
                trials=args.trials,
                timeout_s=args.timeout,
                baselines=args.baselines,
            )
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
            lambda p: engine.profile(
                args.problem,
                args.candidate,
                target=args.target,
                device=args.device,
                depth=args.depth,
                iterations=args.iterations,
                proton=args.proton,
                timeout_s=args.timeout,
                on_progress=p,
            ),
        )
        analysis = engine.analyze_profile(profile=report.model_dump()) if args.advise and not report.errors else None
    if args.json:
        print_json(report)
    else:
        print_profile(report)
        if analysis is not None:
            print_analysis(analysis)
    return EXIT_NOT_OK if report.errors else EXIT_OK


def cmd_analyze(args) -> int:
    with open_engine(args.home) as engine:
        image = (
            args.file if Path(args.file).suffix.lower() in (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp") else None
        )
        report = with_status(
            f"analyzing {args.file}",
            lambda p: engine.analyze_profile(
                path=None if image else args.file, image=image, problem=args.problem, forwards=args.forwards
            ),
        )
    if args.json:
        print_json(report)
    else:
        print_analysis(report)
    return EXIT_OK
