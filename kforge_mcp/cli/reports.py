"""Reports as people read them: tables and coloured lines on stdout (``--json`` skips all of this)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from kforge_mcp.cli.console import (
    PRIORITY_STYLE,
    VERDICT_STYLE,
    Col,
    fitted_table,
    fmt,
    heading,
    out,
    print_diagnostics,
    report_table,
)


def print_compile(report, file: str, written: Sequence[str] = ()) -> None:
    status = Text("ok", style="bold green") if report.ok else Text("failed", style="bold red")
    made_by = ", ".join(f"{k} {v}" for k, v in report.toolchain.items())
    out.print(
        Text.assemble(
            "compile ",
            status,
            f"  target {report.target}, arch {report.arch or 'default'}, "
            f"{report.seconds:.2f} s{', cached' if report.cached else ''}",
            Text(f"; made by {made_by} here" if made_by else "", style="dim"),
        )
    )
    print_diagnostics(report.diagnostics, file)
    if report.kernels:
        cols = [Col("kernel", max_width=48, min_width=16)]
        cols += [Col(h, numeric=True) for h in ("registers", "spills (B)", "shared (B)", "warps", "stages")]
        rows = [
            [
                Text(f"{k.name} [{k.config}]" if k.config else k.name),  # one row per autotune config
                *(fmt(v) for v in (k.registers, k.spills, k.shared_bytes, k.num_warps, k.num_stages)),
            ]
            for k in report.kernels
        ]
        out.print(fitted_table(cols, rows, title=f"kernels (signature {report.signature_source or 'unknown'})"))
    if written:  # --out: the PTX is in a file, not on the screen
        for line in written:
            out.print(line)
        return
    for kind, texts in (("PTX", report.ptx), ("SASS", report.sass)):
        for name, text in (texts or {}).items():
            heading(f"{kind} {name}")
            out.print(Text(text), soft_wrap=True)


def write_assembly(report, path: str) -> list[str]:
    """PTX of every kernel to ``path`` (each after a comment naming it), SASS beside it as .sass; what
    was written, for the report."""
    from pathlib import Path

    written = []
    target = Path(path)
    for kind, texts, where in (
        ("PTX", report.ptx, target),
        ("SASS", report.sass, target.with_suffix(".sass") if target.suffix != ".sass" else target.with_suffix(".s")),
    ):
        if not texts:
            continue
        where.write_text("".join(f"// {kind} of {name}\n{text.rstrip()}\n\n" for name, text in texts.items()))
        written.append(f"{kind} of {len(texts)} kernel{'s' if len(texts) > 1 else ''} written to {where}")
    return written or [f"no PTX came back: nothing written to {path}"]


def print_batch(report, candidates: list[str]) -> None:
    cols = [
        Col("#", numeric=True),
        Col("candidate", max_width=40, min_width=16),
        Col("verdict"),
        Col("speedup", numeric=True),
        Col("cand. ms", numeric=True, drop=1),
        Col("seconds", numeric=True, drop=2),
        Col("node / note", drop=3, max_width=60, min_width=16),
    ]
    rows = []
    for i, (r, c) in enumerate(zip(report.reports, candidates)):
        ms = r.timing.candidate.median_ms if r.timing and r.timing.candidate else None
        note = next((e for e in r.errors if e), "")[:80] or (r.node or "")[:12]
        rows.append(
            [
                str(i),
                Text(c),
                Text(r.verdict or "?", style=VERDICT_STYLE.get(r.verdict, "")),
                fmt(r.speedup, ".3g"),
                fmt(ms, ".4f"),
                fmt(r.seconds, ".1f"),
                Text(note),
            ]
        )
    out.print(fitted_table(cols, rows, title=f"{report.summary.total} candidates"))
    s = report.summary
    counts = ", ".join(f"{k} {v}" for k, v in sorted(s.verdicts.items()))
    best = f"; best: #{s.best_index} at {s.best_speedup:.3g}x" if s.best_index is not None else ""
    out.print(f"{counts}{best}; {s.seconds:.1f} s, {fmt(s.candidates_per_minute, '.1f')} candidates per minute")


def print_verify(report, candidate: str) -> None:
    verdict = report.verdict or "unknown"
    out.print(
        Text.assemble(
            "verdict ",
            Text(verdict.upper(), style=VERDICT_STYLE.get(verdict, "bold")),
            f"  target {report.target} on {report.device} ({report.execution or '?'}), "
            f"{fmt(report.trials)} trials, {fmt(report.seconds, '.1f')} s",
        )
    )
    if report.precision:  # what judged it, and how to run it again
        out.print(
            f"judged at {report.precision} (atol {fmt(report.atol, 'g')}, rtol {fmt(report.rtol, 'g')}), seed {report.seed}"
        )
    if report.speedup is not None:
        style = "green" if report.speedup >= 1 else "yellow"
        out.print(
            Text.assemble(
                "speedup ",
                Text(f"{report.speedup:.3g}x", style=f"bold {style}"),
                f" over {report.speedup_over or 'the baseline'}",
            )
        )
    if report.sol_ms is not None:
        out.print(
            f"speed of light {report.sol_ms:.4g} ms, {fmt(report.fraction_of_sol, '.1%')} of it; {report.sol_path}",
            soft_wrap=True,
        )
        print_paths(report.compute_paths)
    print_timing(report.timing)
    print_input_sets(report)
    for f in report.findings:
        out.print(Text.assemble(Text(f"{f.code}: ", style="bold yellow"), f.message))
    print_mismatches(report.mismatches)
    for e in report.errors:
        if e:
            out.print(Text(e, style="red"))
    print_diagnostics(report.diagnostics, candidate)


def print_paths(paths) -> None:
    """Each compute path: its rate, its measured max error against the tolerance, and whether it passes."""
    if not any(p.max_error is not None for p in paths):
        return
    table = report_table(title="compute paths (max error as a fraction of the tolerance)")
    for column in ("path", "TFLOP/s", "max error", "passes"):
        table.add_column(column, justify="left" if column == "path" else "right")
    for p in sorted(paths, key=lambda p: -p.peak_flops):
        table.add_row(p.path, f"{p.peak_flops / 1e12:.4g}", fmt(p.max_error, ".2g"), "yes" if p.feasible else "no")
    out.print(table)


def print_input_sets(report) -> None:
    """The get_input_sets() shapes checked: one line each, with the speedup when they were timed."""
    for s in report.input_sets:
        state = {True: "correct", False: "mismatch", None: "not reached"}[s.correct]
        line = f"input set {s.index}: {', '.join(s.shapes)}: {state}"
        if s.speedup is not None:
            line += f", speedup {s.speedup:.3g}x over {s.speedup_over}"
        out.print(line, soft_wrap=True)
    if report.speedup_geomean is not None:
        out.print(
            f"speedup geomean over get_inputs() and {len(report.input_sets)} input sets: {report.speedup_geomean:.3g}x"
        )


def print_timing(timing) -> None:
    rows = [(name, getattr(timing, name)) for name in ("candidate", "eager", "compiled")] if timing else []
    rows = [(name, stats) for name, stats in rows if stats is not None]
    if not rows:
        return
    table = report_table(title="timing")
    for column in ("", "median ms", "spread", "samples", "clock"):
        table.add_column(column, justify="right" if column in ("median ms", "spread", "samples") else "left")
    for name, s in rows:
        table.add_row(name, f"{s.median_ms:.4f}", f"{s.spread:.1%}", str(s.samples), s.clock)
    out.print(table)


def print_mismatches(mismatches) -> None:
    """One line per mismatch: they carry too many numbers for an 80-column table."""
    for m in mismatches:
        line = Text(f"mismatch in trial {m.trial}, output {m.output_index}: ", style="bold red")
        line.append(m.reason)
        if m.max_abs_error is not None or m.max_rel_error is not None:
            line.append(f"; max abs error {fmt(m.max_abs_error, '.3g')}, max rel error {fmt(m.max_rel_error, '.3g')}")
        if m.mismatched_fraction is not None:
            line.append(f", {m.mismatched_fraction:.2%} of elements")
        if m.first_mismatch_index is not None:
            line.append(
                f"; first at ({', '.join(map(str, m.first_mismatch_index))}): "
                f"expected {fmt(m.expected, '.6g')}, got {fmt(m.got, '.6g')}"
            )
        if m.atol is not None or m.rtol is not None:
            line.append(f" (atol {fmt(m.atol, 'g')}, rtol {fmt(m.rtol, 'g')})", style="dim")
        out.print(line)  # wrapped at words on a terminal, never inside a number


def print_profile(report) -> None:
    out.print(
        Text.assemble(
            Text("profile ", style="bold"),
            f"{report.source or '-'} on {report.device or '?'} "
            f"({report.device_name or '?'}), {fmt(report.forwards)} forwards, "
            f"{fmt(report.launches_per_forward, 'g')} launches per forward",
        )
    )
    if report.kernels:
        cols = [
            Col("name", max_width=60, min_width=16),
            Col("launches", numeric=True),
            Col("total ms", numeric=True),
            Col("mean us", numeric=True),
            Col("grid", drop=5, max_width=14),
            Col("block", drop=5, max_width=12),
            Col("regs", numeric=True, drop=1),
            Col("occ %", numeric=True, drop=2),
            Col("sm %", numeric=True, drop=3),
            Col("mem %", numeric=True, drop=4),
        ]
        rows = [
            [
                Text(k.name),
                str(k.launches),
                f"{k.device_ms:.4f}",
                f"{k.mean_ms * 1e3:.2f}",
                "x".join(map(str, k.grid)) if k.grid else "-",
                "x".join(map(str, k.block)) if k.block else "-",
                fmt(k.registers),
                fmt(k.achieved_occupancy_pct, ".1f"),
                fmt(k.sm_throughput_pct, ".1f"),
                fmt(k.memory_throughput_pct, ".1f"),
            ]
            for k in report.kernels
        ]
        title = "kernels" if report.device_kernels() else "CPU ops (no device kernels)"
        out.print(fitted_table(cols, rows, title=title))
    if report.host_overhead_ms is not None:
        out.print(f"host launch time per forward: {report.host_overhead_ms * 1e3:.1f} us")
    r = report.roofline
    if r is not None:
        from kforge_mcp.judge.roofline import PLACEHOLDER_NOTE, placeholder_peaks

        fraction = (
            "none: no time measured on this device"
            if r.fraction_of_sol is None and r.modeled
            else fmt(r.fraction_of_sol, ".1%") + (f" of a corrected bound ({r.correction})" if r.below_bound else "")
        )
        if placeholder_peaks(r):
            fraction += f" ({PLACEHOLDER_NOTE})"
        out.print(
            Text.assemble(
                Text("roofline " + ("(a model) " if r.modeled else ""), style="bold"),
                f"{r.device} {r.dtype} ({'bytes only' if r.flops == 0 else f'bound on the {r.path} path'}): "
                f"{r.flops:.3g} FLOPs, "
                f"{r.bytes:.3g} bytes, T_SOL {r.sol_ms * 1e3:.2f} us, {r.bound}-bound, fraction of SOL {fraction}",
            )
        )
        out.print(f"compute path: {r.path_reason}")
        if r.bound_reason:
            out.print(f"bound: {r.bound_reason}" + (f" ({r.kind})" if r.convs else ""))
        print_paths(r.paths)
        for lv in r.levers:  # what the reference's structure allows beyond this bound
            out.print(
                Text.assemble(
                    Text("lever ", style="bold"),
                    f"{lv.title}: T_SOL {lv.sol_ms_after * 1e3:.2f} us "
                    f"({lv.flops_saved:.3g} FLOPs and {lv.bytes_saved:.3g} bytes fewer a forward)",
                ),
            )
        for n in r.notes if r.modeled else []:
            out.print(Text(n, style="dim"))
    for n in report.notes:
        out.print(Text(n, style="dim"))
    for e in report.errors:
        if e:
            out.print(Text(e, style="red"))


def print_analysis(report, printed_notes: Sequence[str] = ()) -> None:
    """The advice. ``printed_notes``: notes already on screen (the profile's), not repeated."""
    out.print(Text(report.summary))
    if report.recommendations and out.width >= 120:
        cols = [
            Col("#", numeric=True),
            Col("priority"),
            Col("gain", numeric=True),
            Col("title", max_width=40),
            Col("evidence", max_width=50),
            Col("action"),
        ]
        rows = [
            [
                str(i),
                Text(rec.priority, style=PRIORITY_STYLE.get(rec.priority, "")),
                f"{rec.expected_gain:.0%}",
                Text(rec.title),
                Text("\n".join(evidence_lines(rec))),
                Text(rec.action),
            ]
            for i, rec in enumerate(report.recommendations, 1)
        ]
        out.print(fitted_table(cols, rows, title="recommendations"))
    elif report.recommendations:  # narrower: one block per recommendation, wrapped at words
        out.print(Text("recommendations", style="bold underline"))
        for i, rec in enumerate(report.recommendations, 1):
            out.print(
                Text.assemble(
                    f"{i}. ",
                    Text(rec.priority, style=PRIORITY_STYLE.get(rec.priority, "")),
                    f", expected gain {rec.expected_gain:.0%}: ",
                    Text(rec.title, style="bold"),
                )
            )
            out.print(Text(rec.action), Text("\n".join(evidence_lines(rec)), style="dim"))
    if report.narrative:
        out.print(Text(report.narrative))
    for n in report.notes:
        if n not in printed_notes:
            out.print(Text(n, style="dim"))


def evidence_lines(rec) -> list[str]:
    return [
        f"{e.metric}{f' [{e.kernel[:24]}]' if e.kernel else ''}: {e.value}" + (f" (good: {e.good})" if e.good else "")
        for e in rec.evidence[:5]
    ]
