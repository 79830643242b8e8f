"""``kforge run-loop``: the whole loop headless, with an LLM provider as the generation agent;
``kforge report``: a run drawn as an HTML page and a PNG."""

from __future__ import annotations

import time

from pydantic import BaseModel, Field
from rich.text import Text

from kforge_mcp.agents.providers import PROVIDERS
from kforge_mcp.agents.results import LoopOptions
from kforge_mcp.cli.console import (
    EXIT_NOT_OK,
    EXIT_OK,
    Col,
    err,
    fitted_table,
    fmt,
    open_engine,
    out,
    print_json,
)
from kforge_mcp.cli.options import add_options, given
from kforge_mcp.core.errors import InputError
from kforge_mcp.core.options import TARGET_TEXT
from kforge_mcp.store import RunStore
from kforge_mcp.targets import TARGETS

LOOP_OPTIONS = (
    "max_iterations",
    "max_seconds",
    "max_tokens",
    "candidates_per_round",
    "trials",
    "baselines",
    "timeout_s",
    "profile",
)


def add_parser(sub, parents) -> None:
    targets, providers = "{" + ",".join(TARGETS) + "}", "{" + ",".join(PROVIDERS) + "}"
    usage = (
        f"%(prog)s PROBLEM --target {targets} --provider {providers} [options]\n"
        f"       %(prog)s --resume RUN_ID [--provider {providers}] [options]"
    )
    p = sub.add_parser(
        "run-loop", parents=parents, usage=usage, help="generate, repair and optimize a kernel with an LLM provider"
    )
    p.add_argument("problem", nargs="?", help="reference in KernelBench form (.py); required unless --resume")
    p.add_argument("--target", metavar=targets, help=f"{TARGET_TEXT}; required unless --resume")
    p.add_argument(
        "--provider",
        choices=PROVIDERS,
        help="LLM provider (key from ANTHROPIC_API_KEY / OPENAI_API_KEY); required unless --resume, which "
        "defaults to the run's",
    )
    p.add_argument("--model", help="model name (default: $KFORGE_MODEL or the provider's default)")
    p.add_argument("--base-url", help="an API-compatible endpoint for the provider")
    add_options(p, LoopOptions, LOOP_OPTIONS)
    p.add_argument("--resume", metavar="RUN_ID", help="continue this run from its last attempt instead of starting one")
    p.add_argument("--output", "-o", help="write the best candidate here")
    p.set_defaults(handler=cmd_run_loop)

    p = sub.add_parser("runs", parents=parents, help="recent loop runs: id, problem, target, best speedup, status")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="the N most recent (default 20)")
    p.set_defaults(handler=cmd_runs)

    p = sub.add_parser("report", parents=parents, help="draw a loop run: HTML page and PNG of speedup per attempt")
    p.add_argument("run_id", help="a run id or a unique prefix of one (kforge runs lists them)")
    p.add_argument("--out", metavar="DIR", help="write report.html and report.png here (default <home>/reports/RUN_ID)")
    p.set_defaults(handler=cmd_report)


def cmd_run_loop(args) -> int:
    from kforge_mcp.agents.loop import LoopDriver
    from kforge_mcp.agents.providers import make_provider

    opts = given(args)
    store = None  # the engine's, unless resuming (read before any engine starts)
    provider, model, base_url = args.provider, args.model, args.base_url
    if args.resume:
        store = RunStore.for_home(args.home or args.settings.home)
        if args.problem or args.target:
            raise InputError("--resume continues a recorded run: give no problem or --target")
        run = store.get_run(args.resume)  # an unknown id names the closest ones
        provider = provider or run.provider
        if provider == run.provider:  # the same model and endpoint as before, unless told otherwise
            model = model or run.options.get("provider_model")
            base_url = base_url or run.options.get("provider_base_url")
        if provider not in PROVIDERS:
            raise InputError(
                f"run '{run.id}' was driven by '{run.provider}'; pass --provider anthropic or openai to resume it here"
            )
    elif not (args.problem and args.target and provider):
        raise InputError("run-loop needs a problem, --target and --provider anthropic or openai (or --resume RUN_ID)")
    # a missing key fails before any work
    generate = make_provider(provider, model=model, base_url=base_url, settings=args.settings)
    opts.update(provider_model=generate.model, **({"provider_base_url": base_url} if base_url else {}))
    say = lambda m: err.print(m, highlight=False)  # noqa: E731
    with open_engine(args.home) as engine:
        driver = LoopDriver(engine, store)
        if args.resume:
            result = driver.resume(args.resume, generate, on_progress=say, **opts)
        else:
            result = driver.run(args.problem, args.target, generate, provider=provider, options=opts, on_progress=say)
    if args.output and result.best:
        with open(args.output, "w") as f:
            f.write(result.best.candidate)
    if getattr(args, "json", False):
        print_json(result)
    else:
        out.print(f"run {result.run_id}: {result.status} ({result.stop_reason})")
        for a in result.attempts:
            out.print(f"  {a.index} {a.pass_:<10} {a.verdict or '-':<14} speedup {a.speedup if a.speedup else '-'}")
        if result.best:
            out.print(
                f"best: attempt {result.best.index}, speedup {result.best.speedup}"
                + (f", written to {args.output}" if args.output else "")
            )
        if result.tokens:
            out.print(f"tokens: {result.tokens}")
        if result.report:
            out.print(f"report: {result.report}")
    return EXIT_OK if result.best else EXIT_NOT_OK


class RunRow(BaseModel):
    id: str
    problem: str
    target: str
    best_speedup: float | None = Field(None, description="speedup of the best correct attempt")
    status: str
    stop_reason: str | None = None
    attempts: int
    updated: float


class RunsList(BaseModel):
    runs: list[RunRow]


def cmd_runs(args) -> int:
    from pathlib import Path

    store = RunStore.for_home(args.home or args.settings.home)
    rows = []
    for run in store.list_runs(limit=max(1, args.limit)):
        best = store.get_attempt(run.id, run.best_attempt) if run.best_attempt is not None else None
        rows.append(
            RunRow(
                id=run.id,
                problem=run.problem_name or Path(run.problem).stem,
                target=run.target,
                best_speedup=best.speedup if best else None,
                status=run.status,
                stop_reason=run.stop_reason,
                attempts=run.attempts,
                updated=run.updated,
            )
        )
    if getattr(args, "json", False):
        print_json(RunsList(runs=rows))
        return EXIT_OK
    if not rows:
        out.print(f"no runs recorded in {store.path}")
        return EXIT_OK
    cols = [
        Col("id"),
        Col("problem", max_width=32, min_width=12),
        Col("target"),
        Col("best", numeric=True),
        Col("status"),
        Col("attempts", numeric=True, drop=2),
        Col("updated", drop=1),
    ]
    when = lambda t: time.strftime("%Y-%m-%d %H:%M", time.localtime(t))  # noqa: E731
    table = fitted_table(
        cols,
        [
            [r.id, Text(r.problem), r.target, fmt(r.best_speedup, ".3g"), r.status, str(r.attempts), when(r.updated)]
            for r in rows
        ],
        title="runs, newest first (an id may be shortened to a unique prefix)",
    )
    out.print(table)
    return EXIT_OK


def cmd_report(args) -> int:
    from kforge_mcp.agents.report import write_report

    files = write_report(RunStore.for_home(args.home or args.settings.home), args.run_id, args.out)
    if getattr(args, "json", False):
        print_json(files)
    else:
        out.print(f"report: {files.html}\nplot:   {files.png}")
    return EXIT_OK
