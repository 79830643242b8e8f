"""The ``kforge`` command line (targets, compile, verify, serve) and the ``kforge-mcp`` server entry.

Reports go to stdout (``--json``: the report's JSON and nothing else); progress, banners and
errors go to stderr. Exit codes: 0 ok / pass, 1 compile failed / verdict not pass, 2 bad input,
130 interrupted.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import socket
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import __version__
from .errors import KforgeError

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

EXIT_OK, EXIT_NOT_OK, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
VERDICT_STYLE = {"pass": "bold green", "fail": "bold red", "suspicious": "bold yellow", "error": "bold red"}
SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow", "note": "bold cyan"}
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WILDCARD_HOSTS = ("0.0.0.0", "::")


# ---- shared helpers ----


@contextmanager
def open_engine(home: str | None, allow_dirs: list[str] | None = None, args=None) -> Iterator:
    from .api import Engine

    engine = Engine(home=home, allow_dirs=allow_dirs, executor=executor_from(args, home) if args else None)
    try:
        yield engine
    finally:
        engine.close()  # kills the workers, whatever happened


def executor_from(args, home: str | None):
    """The executor the options (or $KFORGE_EXECUTOR) ask for; None: the engine's local default."""
    name = getattr(args, "executor", None) or os.environ.get("KFORGE_EXECUTOR")
    cpu_workers = getattr(args, "cpu_workers", None)
    if not name and not cpu_workers:
        return None
    from .engine.executor import make_executor

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
        name, home=home, ray_address=getattr(args, "ray_address", None), cpu_workers=cpu_workers, **options
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
        "interpreter): local default $KFORGE_CPU_WORKERS or 1; Ray default half the cluster's CPUs",
    )
    p.add_argument(
        "--ray-accelerator-type",
        metavar="TYPE",
        help="GPU jobs only on Ray nodes with this accelerator type (e.g. H100)",
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
        out.print(line, soft_wrap=True)
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


# ---- targets ----


def cmd_targets(args) -> int:
    with open_engine(args.home) as engine:
        report = with_status("probing targets", lambda p: engine.list_targets(refresh=args.refresh, on_progress=p))
    if args.json:
        print_json(report)
        return EXIT_OK
    table = Table(title="kforge targets")
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
    return EXIT_OK


# ---- compile ----


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


def print_compile(report, file: str) -> None:
    status = Text("ok", style="bold green") if report.ok else Text("failed", style="bold red")
    out.print(
        Text.assemble(
            "compile ",
            status,
            f"  target {report.target}, arch {report.arch or 'default'}, "
            f"{report.seconds:.2f} s{', cached' if report.cached else ''}",
        )
    )
    print_diagnostics(report.diagnostics, file)
    if report.kernels:
        table = Table(title=f"kernels (signature {report.signature_source or 'unknown'})")
        for column in ("kernel", "registers", "spills (B)", "shared (B)", "warps", "stages"):
            table.add_column(column, justify="left" if column == "kernel" else "right")
        for k in report.kernels:
            table.add_row(k.name, *(fmt(v) for v in (k.registers, k.spills, k.shared_bytes, k.num_warps, k.num_stages)))
        out.print(table)
    for name, ptx in (report.ptx or {}).items():
        out.rule(f"PTX {name}")
        out.print(Text(ptx), soft_wrap=True)


# ---- verify ----


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
                on_progress=p,
            ),
        )
    if args.json:
        print_json(report)
    else:
        print_verify(report, args.candidate)
    return EXIT_OK if report.verdict == "pass" else EXIT_NOT_OK


def cmd_verify_batch(args) -> int:
    import time

    from .schemas import VerifyBatchReport, summarize_batch

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


def print_batch(report, candidates: list[str]) -> None:
    table = Table(title=f"{report.summary.total} candidates")
    for column in ("#", "candidate", "verdict", "speedup", "candidate ms", "seconds", "node / note"):
        table.add_column(column, justify="right" if column in ("#", "speedup", "candidate ms", "seconds") else "left")
    for i, (r, c) in enumerate(zip(report.reports, candidates)):
        ms = r.timing.candidate.median_ms if r.timing and r.timing.candidate else None
        note = next((e for e in r.errors if e), "")[:80] or (r.node or "")[:12]
        table.add_row(
            str(i),
            c,
            Text(r.verdict or "?", style=VERDICT_STYLE.get(r.verdict, "")),
            fmt(r.speedup, ".3g"),
            fmt(ms, ".4f"),
            fmt(r.seconds, ".1f"),
            Text(note),
        )
    out.print(table)
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
    if report.speedup is not None:
        style = "green" if report.speedup >= 1 else "yellow"
        out.print(
            Text.assemble(
                "speedup ",
                Text(f"{report.speedup:.3g}x", style=f"bold {style}"),
                f" over {report.speedup_over or 'the baseline'}",
            )
        )
    print_timing(report.timing)
    for f in report.findings:
        out.print(Text.assemble(Text(f"{f.code}: ", style="bold yellow"), f.message), soft_wrap=True)
    print_mismatches(report.mismatches)
    for e in report.errors:
        if e:
            out.print(Text(e, style="red"), soft_wrap=True)
    print_diagnostics(report.diagnostics, candidate)


def print_timing(timing) -> None:
    rows = [(name, getattr(timing, name)) for name in ("candidate", "eager", "compiled")] if timing else []
    rows = [(name, stats) for name, stats in rows if stats is not None]
    if not rows:
        return
    table = Table(title="timing")
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
        out.print(line, soft_wrap=True)


# ---- profile and analyze ----

PRIORITY_STYLE = {"high": "bold red", "medium": "bold yellow", "low": "dim"}


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
        table = Table(title="kernels" if report.device_kernels() else "CPU ops (no device kernels)")
        for column in (
            "name",
            "launches",
            "total ms",
            "mean us",
            "grid",
            "block",
            "regs",
            "occupancy %",
            "sm %",
            "mem %",
        ):
            table.add_column(column, justify="left" if column == "name" else "right")
        for k in report.kernels:
            name = k.name if len(k.name) <= 60 else k.name[:57] + "..."
            table.add_row(
                Text(name),
                str(k.launches),
                f"{k.device_ms:.4f}",
                f"{k.mean_ms * 1e3:.2f}",
                "x".join(map(str, k.grid)) if k.grid else "-",
                "x".join(map(str, k.block)) if k.block else "-",
                fmt(k.registers),
                fmt(k.achieved_occupancy_pct, ".1f"),
                fmt(k.sm_throughput_pct, ".1f"),
                fmt(k.memory_throughput_pct, ".1f"),
            )
        out.print(table)
    if report.host_overhead_ms is not None:
        out.print(f"host launch time per forward: {report.host_overhead_ms * 1e3:.1f} us")
    r = report.roofline
    if r is not None:
        out.print(
            Text.assemble(
                Text("roofline ", style="bold"),
                f"{r.device} {r.dtype}: {r.flops:.3g} FLOPs, "
                f"{r.bytes:.3g} bytes, T_SOL {r.sol_ms * 1e3:.2f} us, {r.bound}-bound, fraction of SOL "
                f"{fmt(r.fraction_of_sol, '.1%')}",
            )
        )
    for n in report.notes:
        out.print(Text(n, style="dim"), soft_wrap=True)
    for e in report.errors:
        if e:
            out.print(Text(e, style="red"), soft_wrap=True)


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


def print_analysis(report) -> None:
    out.print(Text(report.summary), soft_wrap=True)
    if report.recommendations:
        table = Table(title="recommendations")
        for column in ("#", "priority", "gain", "title", "evidence", "action"):
            table.add_column(column, justify="right" if column in ("#", "gain") else "left")
        for i, rec in enumerate(report.recommendations, 1):
            evidence = "\n".join(
                f"{e.metric}{f' [{e.kernel[:24]}]' if e.kernel else ''}: {e.value}"
                + (f" (good: {e.good})" if e.good else "")
                for e in rec.evidence[:5]
            )
            table.add_row(
                str(i),
                Text(rec.priority, style=PRIORITY_STYLE.get(rec.priority, "")),
                f"{rec.expected_gain:.0%}",
                Text(rec.title),
                Text(evidence),
                Text(rec.action),
            )
        out.print(table)
    if report.narrative:
        out.print(Text(report.narrative), soft_wrap=True)
    for n in report.notes:
        out.print(Text(n, style="dim"), soft_wrap=True)


# ---- serve ----


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def transport_security(host: str):
    """DNS-rebinding protection stays on in every case (the SDK turns it off for any host but
    127.0.0.1 / localhost / ::1). Accepted Host headers: the loopback names, the bound host, and
    for a remote bind this machine's names and addresses."""
    from mcp.server.transport_security import TransportSecuritySettings

    names = list(LOOPBACK_NAMES)
    wildcard = host in WILDCARD_HOSTS
    if not wildcard:
        names.append(url_host(host))
    if not is_loopback(host):
        names += [socket.gethostname(), socket.getfqdn()]
        if wildcard:
            try:
                names += [url_host(a[4][0]) for a in socket.getaddrinfo(socket.gethostname(), None)]
            except OSError:
                pass
    names = list(dict.fromkeys(names))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{n}:*" for n in names],
        allowed_origins=[f"http://{n}:*" for n in names],
    )


def banner(args, engine) -> None:
    name = Text("kforge", style="bold magenta")
    lines = [Text.assemble(name, f" {__version__}  MCP server, transport {args.transport}")]
    if args.transport == "stdio":
        command = "kforge-mcp" + (f" --home {args.home}" if args.home else "")
        lines.append(Text(f"connect: configure your MCP client to launch the command: {command}"))
    else:
        url = f"http://{url_host(args.host)}:{args.port}/mcp"
        lines.append(Text.assemble("url:     ", Text(url, style="bold"), "  (streamable HTTP)"))
        reachable = socket.gethostname() if args.host in WILDCARD_HOSTS else url_host(args.host)
        lines.append(Text(f"connect: point your MCP client at http://{reachable}:{args.port}/mcp"))
        lines.append(targets_line(engine))
        if args.token:
            lines.append(Text("auth:    bearer token required (Authorization: Bearer <token>)"))
        if not is_loopback(args.host):
            lines.append(
                Text(
                    f"warning: listening on {args.host}: anyone with the token can run code on this machine",
                    style="bold yellow",
                )
            )
    lines.append(
        Text(
            f"paths:   problems and candidates given as paths must lie under {', '.join(map(str, engine.allow_dirs))}",
            style="dim",
        )
    )
    sandbox = engine.list_targets().host.get("sandbox") if engine._targets is not None else None
    if sandbox:
        lines.append(Text(f"sandbox: {sandbox}", style="dim"))
    lines.append(Text(f"home:    {engine.home}", style="dim"))
    for line in lines:
        err.print(line, soft_wrap=True)


def targets_line(engine) -> Text:
    try:
        report = with_status("probing targets", lambda p: engine.list_targets(on_progress=p))
    except KforgeError as e:
        return Text(f"targets: probe failed: {e}", style="yellow")
    parts = [f"{t.name} ({', '.join(t.devices)})" for t in report.targets if t.available]
    parts += [f"{t.name} (compile only)" for t in report.targets if not t.available and t.can_compile]
    return Text(f"targets: {', '.join(parts) or 'none available here'}")


def cmd_serve(args) -> int:
    from .http_transport import TOKEN_ENV

    args.token = args.token or os.environ.get(TOKEN_ENV) or None
    if args.transport == "http" and not is_loopback(args.host) and not args.token:
        raise KforgeError(
            f"refusing to listen on non-loopback host '{args.host}' without authentication: the server "
            f"runs submitted code; set a bearer token with --token or ${TOKEN_ENV}"
        )
    from .server import build_server

    interrupted = False
    with open_engine(args.home, args.allow_dir or [os.getcwd()], args=args) as engine:
        server = build_server(engine)
        banner(args, engine)
        try:
            if args.transport == "stdio":
                engine.executor.prewarm("compile")
                server.run("stdio")
            else:
                from . import http_transport

                http_transport.serve(
                    server,
                    args.host,
                    args.port,
                    transport_security(args.host),
                    token=args.token,
                    max_request_bytes=int(args.max_request_mb * 2**20),
                )
        except KeyboardInterrupt:
            interrupted = True
    err.print(Text("kforge: server stopped", style="dim"))
    if interrupted and args.transport == "stdio":
        # anyio's stdin reader is a non-daemon thread blocked in read(): it would hold the exit
        # until the client closes stdin. The workers are already gone; leave now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_OK)
    return EXIT_OK


def port_number(value: str) -> int:
    port = int(value)
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be between 1 and 65535, got {port}")
    return port


def add_serve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio (default; the client launches the server) or streamable HTTP",
    )
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=8765, help="HTTP port (default 8765)")
    p.add_argument(
        "--token",
        help="HTTP bearer token clients must send (default $KFORGE_HTTP_TOKEN); required for a non-loopback --host",
    )
    p.add_argument(
        "--max-request-mb", type=float, default=4.0, metavar="MB", help="largest HTTP request body accepted (default 4)"
    )
    p.add_argument(
        "--allow-dir",
        action="append",
        metavar="DIR",
        help="problems and candidates given as paths must lie under one of these (repeatable; "
        "default: the working directory)",
    )
    add_executor_options(p)
    p.set_defaults(handler=cmd_serve)


def add_home_option(p: argparse.ArgumentParser, default=None) -> None:
    p.add_argument(
        "--home",
        default=default,
        metavar="DIR",
        help="engine home: caches, worker state (default $KFORGE_HOME or ~/.kforge)",
    )


# ---- parsers and entry points ----


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
    p.set_defaults(handler=cmd_targets)

    p = sub.add_parser("compile", parents=[report], help="compile a candidate without running it")
    p.add_argument("file", help="candidate source (.py)")
    p.add_argument("--target", required=True, help="cuda, cute, triton or metal")
    p.add_argument("--arch", help="e.g. sm_90a (default: this GPU's, or the target's default)")
    p.add_argument("--problem", help="problem file: trace the real launches for exact kernel signatures")
    p.add_argument("--ptx", action="store_true", help="also print the PTX of each kernel")
    p.set_defaults(handler=cmd_compile)

    p = sub.add_parser("verify", parents=[report], help="check a candidate against its reference and time it")
    p.add_argument("problem", help="reference in KernelBench form (.py)")
    p.add_argument("candidate", help="source defining class ModelNew (.py)")
    p.add_argument("--target", required=True, help="cuda, cute, triton or metal")
    p.add_argument("--device", help="e.g. cuda:0, xpu:0 or cpu (default: the best one here)")
    p.add_argument("--trials", type=int, default=5, help="correctness trials, each on fresh inputs (default 5)")
    p.add_argument("--atol", type=float, help="absolute tolerance (default per dtype)")
    p.add_argument("--rtol", type=float, help="relative tolerance (default per dtype)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S", help="kill the worker after S seconds")
    p.add_argument(
        "--baselines",
        type=lambda s: [b.strip() for b in s.split(",") if b.strip()],
        default=["eager", "compiled"],
        help="comma-separated baselines to time (default eager,compiled)",
    )
    add_executor_options(p)
    p.set_defaults(handler=cmd_verify)

    p = sub.add_parser("verify-batch", parents=[report], help="verify many candidates of one problem at once")
    p.add_argument("problem", help="reference in KernelBench form (.py)")
    p.add_argument("candidates", nargs="+", help="sources defining class ModelNew (.py)")
    p.add_argument("--target", required=True, help="cuda, cute, triton or metal")
    p.add_argument("--device", help="e.g. cuda:0 or cpu (default: the best one here)")
    p.add_argument("--trials", type=int, default=5, help="correctness trials per candidate (default 5)")
    p.add_argument(
        "--timeout", type=float, default=300.0, metavar="S", help="per candidate: kill its worker after S seconds"
    )
    p.add_argument(
        "--baselines",
        type=lambda s: [b.strip() for b in s.split(",") if b.strip()],
        default=["eager", "compiled"],
        help="comma-separated baselines to time (default eager,compiled)",
    )
    add_executor_options(p)
    p.set_defaults(handler=cmd_verify_batch)

    p = sub.add_parser("profile", parents=[report], help="profile a candidate (or the reference): kernels and roofline")
    p.add_argument("problem", help="reference in KernelBench form (.py)")
    p.add_argument("candidate", nargs="?", help="source defining class ModelNew (.py); omit to profile the reference")
    p.add_argument("--target", required=True, help="cuda, cute, triton or metal")
    p.add_argument("--device", help="e.g. cuda:0 or cpu (default: the best one here)")
    p.add_argument(
        "--depth",
        choices=("timeline", "metrics"),
        default="timeline",
        help="timeline: torch.profiler; metrics: also Nsight Compute when ncu is on PATH",
    )
    p.add_argument("--iterations", type=int, default=5, help="profiled forwards (default 5)")
    p.add_argument("--proton", action="store_true", help="also run Triton's proton profiler")
    p.add_argument("--advise", action="store_true", help="also print the analysis agent's recommendations")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S", help="kill the worker after S seconds")
    p.set_defaults(handler=cmd_profile)

    p = sub.add_parser(
        "analyze",
        parents=[report],
        help="recommendations from a captured profile (ncu CSV, torch.profiler trace, proton .hatchet) or a screenshot",
    )
    p.add_argument("file", help="the captured profile")
    p.add_argument("--problem", help="the reference (.py): adds its roofline")
    p.add_argument("--forwards", type=int, help="forwards the file holds (default: inferred from launch counts)")
    p.set_defaults(handler=cmd_analyze)

    from .agents.cli_loop import add_parser as add_run_loop

    add_run_loop(sub, [report])

    from .bench_cli import add_parser as add_bench

    add_bench(sub, [report], add_executor_options)

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


def run(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return args.handler(args)
    except (KforgeError, OSError) as e:  # bad input, or e.g. an unusable --home
        err.print(Text(f"error: {e}", style="red"), soft_wrap=True)
        return EXIT_INPUT
    except KeyboardInterrupt:
        err.print(Text("interrupted", style="yellow"))
        return EXIT_INTERRUPTED


def main(argv: list[str] | None = None) -> None:
    sys.exit(run(build_parser().parse_args(argv)))


def server_main(argv: list[str] | None = None) -> None:
    sys.exit(run(build_server_parser().parse_args(argv)))


if __name__ == "__main__":
    main()
