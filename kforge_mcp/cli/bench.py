"""``kforge bench``: judge a suite (see kforge_mcp.suite), with a progress bar and a table."""

from __future__ import annotations

import threading

from kforge_mcp.cli.console import (
    EXIT_INPUT,
    EXIT_OK,
    VERDICT_STYLE,
    Col,
    err,
    fitted_table,
    fmt,
    open_engine,
    out,
    print_json,
)
from kforge_mcp.cli.options import add_options, add_target, given
from kforge_mcp.core.options import VerifyOptions

LAYOUT = """Layout: every *.py in --problems is a problem (a KernelBench level1/ folder works as it is). Its
candidates are --candidates/<problem stem>/*.py, or flat --candidates/<problem stem>.py. A candidate file
named after a target (triton.py, triton_naive.py, cuda-v2.py, cute.py) is judged only under that target;
any other file (sample_0.py) is judged under --target. Results go to --out as they finish
(results.jsonl); a rerun judges only new or changed files. Failing, crashing, hanging and cheating
candidates are results: the exit code is 0 unless the command itself was wrong (2)."""


def add_parser(sub, parents, add_executor_options) -> None:
    import argparse

    p = sub.add_parser(
        "bench",
        parents=parents,
        help="judge a suite of problems and candidates (KernelBench layout): "
        "summary.json, a table, bench.png and bench.html",
        description=LAYOUT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--problems", required=True, metavar="DIR", help="folder of problems (KernelBench form)")
    p.add_argument("--candidates", metavar="DIR", help="folder of candidates: <problem stem>/*.py or <problem stem>.py")
    add_target(p)
    p.add_argument(
        "--out", required=True, metavar="DIR", help="where results.jsonl, summary.json, bench.png, bench.html go"
    )
    p.add_argument("--generate", action="store_true", help="write the candidates with the loop and --provider instead")
    p.add_argument("--provider", choices=("anthropic", "openai"), help="LLM provider for --generate")
    p.add_argument("--model", help="model name (default: $KFORGE_MODEL or the provider's default)")
    p.add_argument("--base-url", help="an API-compatible endpoint for the provider")
    p.add_argument("--iterations", type=int, default=8, help="loop attempts per problem with --generate (default 8)")
    add_options(p, VerifyOptions, ("device", "trials", "timeout_s", "baselines", "timing_budget_s"))
    p.add_argument("--no-plot", action="store_true", help="skip bench.png and bench.html")
    add_executor_options(p)
    p.set_defaults(handler=cmd_bench)


def cmd_bench(args) -> int:
    from pathlib import Path

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kforge_mcp.core.problem import default_allowed_roots
    from kforge_mcp.suite import discover, run_bench

    if args.generate == bool(args.candidates):
        err.print("bench needs --candidates DIR, or --generate with --provider (not both)")
        return EXIT_INPUT
    if args.generate and not args.provider:
        err.print("bench --generate needs --provider anthropic or openai")
        return EXIT_INPUT
    discover(args.problems, args.candidates, args.target)  # bad folders fail here, before any worker starts
    roots = default_allowed_roots() + [Path(d).resolve() for d in (args.problems, args.candidates, args.out) if d]
    result, failure, cancel = {}, [], threading.Event()
    columns = (
        TextColumn("[bold]bench"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
    )
    with (
        open_engine(args.home, allow_dirs=[str(r) for r in roots], args=args) as engine,
        Progress(*columns, console=err, transient=False) as bar,
    ):
        task = bar.add_task("discovering", total=None)

        def on_progress(done: int, total: int, message: str) -> None:
            bar.update(task, completed=done, total=total, description=message[:60])

        def work() -> None:
            try:
                result["summary"] = run_bench(
                    args.problems,
                    args.candidates,
                    args.target,
                    args.out,
                    engine=engine,
                    provider=args.provider if args.generate else None,
                    model=args.model,
                    base_url=args.base_url,
                    iterations=args.iterations,
                    plot=not args.no_plot,
                    on_progress=on_progress,
                    cancel=cancel,
                    **given(args),
                )
            except BaseException as e:  # noqa: BLE001  (re-raised on the main thread)
                failure.append(e)

        # the run works on a thread, so Ctrl-C here cancels the jobs instead of waiting them out
        runner = threading.Thread(target=work, name="kforge-bench", daemon=True)
        runner.start()
        try:
            while runner.is_alive():
                runner.join(0.2)
        except KeyboardInterrupt:
            cancel.set()
            runner.join(30)
            raise
    if failure:
        raise failure[0]
    summary = result["summary"]
    if args.json:
        print_json(summary)
    else:
        print_summary(summary)
    return EXIT_OK


def print_summary(summary) -> None:
    from pathlib import Path

    from rich.text import Text

    wide = out.width >= 120  # narrower: findings and errors go below the table, one line per problem
    title = (
        f"kforge bench: {summary.target}, {summary.suite.problems} problems "
        f"({summary.device or '-'}, {summary.execution or '-'})"
    )

    def longest(names, cap: int) -> int:
        return min(cap, max((len(n) for n in names), default=0))

    # the winner stays in view: on a narrow terminal the ratios the speedup already sums up go first
    cols = [
        Col("problem", max_width=40, min_width=longest((r.problem for r in summary.problems), 24)),
        Col("best", min_width=longest((r.best_verdict or "none" for r in summary.problems), 10)),
        Col(
            "candidate",
            max_width=30,
            min_width=longest((Path(r.best_candidate).name for r in summary.problems if r.best_candidate), 24),
        ),
        Col("speedup", numeric=True),
        Col("vs eager", numeric=True, drop=3),
        Col("vs compile", numeric=True, drop=2),
        Col("SOL %", numeric=True, drop=1),
    ]
    cols += [Col("findings / error", max_width=70)] if wide else []
    rows, below = [], []
    for r in summary.problems:
        sol = None if r.fraction_of_sol is None else r.fraction_of_sol * 100
        notes = (r.error or "").replace(r.path, Path(r.path).name) or ", ".join(f["code"] for f in r.findings)
        if not r.correct and not r.error:
            bad = next((c for c in r.candidates if c.candidate == r.best_candidate), None)
            notes = (bad.error if bad and bad.error else "") or notes
        row = [
            Text(r.problem),
            Text(r.best_verdict or "none", style=VERDICT_STYLE.get(r.best_verdict, "bold red")),
            Text(Path(r.best_candidate).name if r.best_candidate else "-"),
            fmt(r.speedup, ".3g"),
            fmt(r.speedup_eager, ".3g"),
            fmt(r.speedup_compiled, ".3g"),
            fmt(sol, ".0f"),
        ]
        rows.append(row + ([Text(notes[:70])] if wide else []))
        if notes and not wide:
            below.append(f"  {r.problem}: {notes}")
    table = fitted_table(cols, rows, title=title)
    out.print(table)
    for line in below:
        out.print(Text(line))
    s = summary.suite
    fast = "  ".join(f"fast_{p} {v:.0%}" for p, v in s.fast_p.items())
    out.print(
        f"correct {s.correct}/{s.problems} ({s.correctness_rate:.0%}); "
        f"geomean speedup {fmt(s.geomean_speedup, '.3g')}x "
        f"over {s.correct} correct problems, {fmt(s.geomean_speedup_all, '.3g')}x with failures as 1.0x; {fast}"
    )
    out.print(
        f"{summary.judged_now} judged now, {summary.reused} reused, {summary.seconds:.0f} s; "
        + "; ".join(f"{k}: {v}" for k, v in summary.files.items() if k != "results")
    )
    for note in summary.notes:
        out.print(Text(f"note: {note}", style="yellow"))
