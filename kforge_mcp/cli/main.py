"""The ``kforge`` command line and the ``kforge-mcp`` server entry: the parsers and ``run``.

Reports go to stdout (``--json``: the report's JSON and nothing else); progress, banners and
errors go to stderr. Exit codes: 0 ok / pass, 1 compile failed / verdict not pass, 2 bad input,
130 interrupted.
"""

from __future__ import annotations

import argparse
import signal
import sys

from rich.text import Text

from kforge_mcp import __version__, platforms, targets
from kforge_mcp.agents import prompts
from kforge_mcp.cli import bench, run_loop
from kforge_mcp.cli.commands import cmd_analyze, cmd_compile, cmd_profile, cmd_targets, cmd_verify, cmd_verify_batch
from kforge_mcp.cli.console import EXIT_INPUT, EXIT_INTERRUPTED, add_executor_options, add_home_option, err
from kforge_mcp.cli.options import add_options, add_target
from kforge_mcp.cli.serve import add_serve_options
from kforge_mcp.core.errors import KforgeError
from kforge_mcp.core.options import AnalyzeCall, CompileCall, ProfileCall, VerifyOptions
from kforge_mcp.core.settings import Settings

JUDGING = ("device", "trials", "atol", "rtol", "precision", "seed", "timeout_s", "baselines", "timing_budget_s")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kforge",
        description="Write, compile and verify GPU kernels against PyTorch references; serve the same tools over MCP.",
    )
    parser.add_argument("--version", action="version", version=f"kforge {__version__}")
    add_home_option(parser)
    common = argparse.ArgumentParser(add_help=False)  # --home after the subcommand too
    add_home_option(common, default=argparse.SUPPRESS)
    report = argparse.ArgumentParser(add_help=False, parents=[common])
    report.add_argument("--json", action="store_true", help="print the report as JSON, nothing else on stdout")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("targets", parents=[report], help="which targets work here, and why not")
    p.add_argument("--refresh", action="store_true", help="probe again instead of using the cached probe")
    add_executor_options(p)  # under Ray: each live node and what it offers
    p.set_defaults(handler=cmd_targets)

    p = sub.add_parser("compile", parents=[report], help="compile a candidate without running it")
    p.add_argument("file", nargs="?", metavar="candidate", help="candidate source (.py)")
    p.add_argument("--candidate", "--source", dest="candidate", help="the candidate, as an option (as in verify)")
    add_target(p)
    add_options(p, CompileCall, ("arch", "problem", "timeout_s"))
    p.add_argument("--ptx", action="store_true", help="also print the PTX (and SASS where the target gives it)")
    p.add_argument(
        "--out", metavar="FILE", help="write the PTX of every kernel to FILE (SASS beside it, as .sass); implies --ptx"
    )
    p.set_defaults(handler=cmd_compile)

    p = sub.add_parser("verify", parents=[report], help="check a candidate against its reference and time it")
    p.add_argument("problem", help="reference in KernelBench form (.py)")
    p.add_argument("candidate", help="source defining class ModelNew (.py)")
    add_target(p)
    add_options(p, VerifyOptions, (*JUDGING, "timing_sets"))
    add_executor_options(p)
    p.set_defaults(handler=cmd_verify)

    p = sub.add_parser("verify-batch", parents=[report], help="verify many candidates of one problem at once")
    p.add_argument("problem", help="reference in KernelBench form (.py)")
    p.add_argument("candidates", nargs="+", help="sources defining class ModelNew (.py)")
    add_target(p)
    add_options(p, VerifyOptions, JUDGING)
    add_executor_options(p)
    p.set_defaults(handler=cmd_verify_batch)

    p = sub.add_parser("profile", parents=[report], help="profile a candidate (or the reference): kernels and roofline")
    p.add_argument("problem", help="reference in KernelBench form (.py)")
    p.add_argument("candidate", nargs="?", help="source defining class ModelNew (.py); omit to profile the reference")
    add_target(p)
    add_options(p, ProfileCall, ("device", "depth", "iterations", "proton", "device_model", "timeout_s"))
    p.add_argument("--advise", action="store_true", help="also print the analysis agent's recommendations")
    p.set_defaults(handler=cmd_profile)

    p = sub.add_parser(
        "analyze",
        parents=[report],
        help="recommendations from a captured profile (ncu CSV, torch.profiler trace, proton .hatchet) or a screenshot",
    )
    p.add_argument("file", help="the captured profile")
    add_options(p, AnalyzeCall, ("problem", "device_model", "forwards"))
    p.set_defaults(handler=cmd_analyze)

    run_loop.add_parser(sub, [report])
    bench.add_parser(sub, [report], add_executor_options)

    p = sub.add_parser("serve", parents=[common], help="run the MCP server (stdio or streamable HTTP)")
    add_serve_options(p)
    return parser


def build_server_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kforge-mcp", description="The kforge MCP server.")
    parser.add_argument("--version", action="version", version=f"kforge-mcp {__version__}")
    add_home_option(parser)
    add_serve_options(parser)
    return parser


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt  # unwinds through the engine's `finally`, which kills the workers


def read_settings() -> Settings:
    """The command line's entry: KFORGE_* read once, before the parser (which lists the targets), and passed down on
    ``args``."""
    settings = Settings.read()
    platforms.use(settings)
    targets.use(settings)
    prompts.use(settings)
    return settings


def run(args: argparse.Namespace, settings: Settings) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    args.settings = settings
    try:
        return args.handler(args)
    except (KforgeError, OSError) as e:  # bad input, or e.g. an unusable --home
        err.print(Text(f"error: {e}", style="red"), soft_wrap=True)
        return EXIT_INPUT
    except KeyboardInterrupt:
        err.print(Text("interrupted", style="yellow"))
        return EXIT_INTERRUPTED


def main(argv: list[str] | None = None) -> None:
    settings = read_settings()
    sys.exit(run(build_parser().parse_args(argv), settings))


def server_main(argv: list[str] | None = None) -> None:
    settings = read_settings()
    sys.exit(run(build_server_parser().parse_args(argv), settings))
