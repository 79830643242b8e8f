"""``kforge run-loop``: the whole loop headless, with an LLM provider as the generation agent."""

from __future__ import annotations


def add_parser(sub, parents) -> None:
    p = sub.add_parser("run-loop", parents=parents, help="generate, repair and optimize a kernel with an LLM provider")
    p.add_argument("problem", help="reference in KernelBench form (.py)")
    p.add_argument("--target", required=True, help="triton or cuda (targets with prompt templates)")
    p.add_argument("--provider", choices=("anthropic", "openai"), default=None,
                   help="LLM provider (key from ANTHROPIC_API_KEY / OPENAI_API_KEY)")  # fmt: skip
    p.add_argument("--model", help="model name (default: $KFORGE_MODEL or the provider's default)")
    p.add_argument("--base-url", help="an API-compatible endpoint for the provider")
    p.add_argument("--max-iterations", type=int, default=8, help="attempts in all (default 8)")
    p.add_argument("--max-seconds", type=float, help="wall-time budget")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--baselines", type=lambda s: [b.strip() for b in s.split(",") if b.strip()],
                   default=["eager", "compiled"], help="comma-separated baselines (default eager,compiled)")  # fmt: skip
    p.add_argument("--resume", metavar="RUN_ID", help="continue this run instead of starting one")
    p.add_argument("--output", "-o", help="write the best candidate here")
    p.set_defaults(handler=cmd_run_loop)


def cmd_run_loop(args) -> int:
    from ..cli import EXIT_NOT_OK, EXIT_OK, err, open_engine, out, print_json
    from .loop import LoopDriver
    from .providers import make_provider

    if args.provider is None and not args.resume:
        err.print("run-loop needs --provider anthropic or openai")
        return 2
    generate = make_provider(args.provider or "anthropic", model=args.model, base_url=args.base_url)
    with open_engine(args.home) as engine:
        driver = LoopDriver(engine)
        say = lambda m: err.print(m, highlight=False)  # noqa: E731
        if args.resume:
            result = driver.resume(args.resume, generate, on_progress=say, max_iterations=args.max_iterations)
        else:
            opts = {"max_iterations": args.max_iterations, "max_seconds": args.max_seconds, "trials": args.trials,
                    "baselines": args.baselines}  # fmt: skip
            result = driver.run(args.problem, args.target, generate, provider=args.provider,
                                options={k: v for k, v in opts.items() if v is not None}, on_progress=say)  # fmt: skip
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
            out.print(f"best: attempt {result.best.index}, speedup {result.best.speedup}"
                      + (f", written to {args.output}" if args.output else ""))  # fmt: skip
    return EXIT_OK if result.best else EXIT_NOT_OK
