"""``kforge serve`` and ``kforge-mcp``: the MCP server over stdio or streamable HTTP, with the
host checks that keep a remote bind from running code for anyone."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import shutil
import socket
import sys
import threading
from pathlib import Path

from rich.text import Text

from kforge_mcp import __version__
from kforge_mcp.cli.console import EXIT_OK, add_executor_options, err, open_engine, with_status
from kforge_mcp.core.errors import KforgeError

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WILDCARD_HOSTS = ("0.0.0.0", "::")


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
                names += [url_host(str(a[4][0])) for a in socket.getaddrinfo(socket.gethostname(), None)]
            except OSError:
                pass
    names = list(dict.fromkeys(names))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{n}:*" for n in names],
        allowed_origins=[f"http://{n}:*" for n in names],
    )


def banner(args, engine) -> None:
    """How to connect, the launcher a host runs (``command:``), the targets (over stdio they follow once probed:
    the host's handshake is not kept waiting), and what the server allows."""
    name = Text("kforge", style="bold magenta")
    lines = [Text.assemble(name, f" {__version__}  MCP server, transport {args.transport}")]
    launcher, on_path = server_launcher()
    found = "on PATH" if on_path else "not on PATH: write this absolute path as the host's command"
    if args.transport == "http":
        found = f"for hosts that launch the server over stdio; {found}"
    command = Text(f"command: {launcher}") + Text(f"  ({found})", style="dim")
    if args.transport == "stdio":
        launch = "kforge-mcp" + (f" --home {args.home}" if args.home else "")
        lines.append(Text(f"connect: configure your MCP client to launch the command: {launch}"))
        lines.append(command)
    else:
        url = f"http://{url_host(args.host)}:{args.port}/mcp"
        lines.append(Text.assemble("url:     ", Text(url, style="bold"), "  (streamable HTTP)"))
        reachable = socket.gethostname() if args.host in WILDCARD_HOSTS else url_host(args.host)
        lines.append(Text(f"connect: point your MCP client at http://{reachable}:{args.port}/mcp"))
        lines.append(command)
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
    sandbox = engine.targets.report.host.get("sandbox") if engine.targets.report is not None else None
    if sandbox:
        lines.append(Text(f"sandbox: {sandbox}", style="dim"))
    lines.append(Text(f"home:    {engine.home}", style="dim"))
    for line in lines:
        err.print(line, soft_wrap=True)
    if args.transport == "stdio":
        threading.Thread(
            target=lambda: err.print(targets_line(engine, spinner=False), soft_wrap=True),
            daemon=True,
            name="kforge-banner-targets",
        ).start()


def server_launcher() -> tuple[str, bool]:
    """(absolute path of the kforge-mcp beside this Python, whether a host finds that one on PATH)."""
    beside = Path(sys.executable).parent / "kforge-mcp"
    launcher = str(beside) if beside.is_file() else shutil.which("kforge-mcp") or "kforge-mcp"
    found = shutil.which("kforge-mcp")
    return launcher, found is not None and os.path.realpath(found) == os.path.realpath(launcher)


def quietly(fn):
    """``fn`` for a background thread: a failure is left for the call that needs the answer to report."""

    def run():
        with contextlib.suppress(Exception):
            fn()

    return run


def warm_up(engine) -> None:
    """The probe, then the first GPU's worker started (it imports torch, seconds on a cold machine) and
    torch.compile's fixed cost paid there, its imports then a tiny compile, so a host's first verify pays
    neither; then the metrics profiler's program launched for the first profile. Beside them a CPU worker
    measures a tiny problem's compute paths (their imports took 5-6 s on a fresh GPU machine), which a first
    profile otherwise waits for. Only while each lane is idle: a verify sent at once pays the same cost itself,
    and a warm-up ahead of it made that verify slower (bench/feedback_latency.py measures both)."""
    from kforge_mcp.core.requests import WarmUpRequest

    report = engine.list_targets()
    gpus = sorted({d for t in report.targets if t.available for d in t.devices if not d.startswith("cpu")})
    if not gpus:
        return
    engine.executor.prewarm(gpus[0])
    if not engine.settings.gpu_warmup_on:
        return
    # after_work: the probe has run on that lane already; still only while no job waits for it
    paths_request = WarmUpRequest(device="cpu", stage="paths")
    paths = threading.Thread(
        target=quietly(lambda: engine.executor.warm_up("compile", paths_request, 300, after_work=True)),
        daemon=True,
        name="kforge-paths-warm-up",
    )
    paths.start()
    stages = ["imports", "compile"] + (["profilers"] if engine.settings.profile_spare_on else [])
    for stage in stages:
        if engine.executor.warm_up(gpus[0], WarmUpRequest(device=gpus[0], stage=stage), timeout_s=300) is None:
            break
    paths.join()


def targets_line(engine, spinner: bool = True) -> Text:
    try:
        if spinner:
            report = with_status("probing targets", lambda p: engine.list_targets(on_progress=p))
        else:
            report = engine.list_targets()
    except KforgeError as e:
        return Text(f"targets: probe failed: {e}", style="yellow")
    parts = [f"{t.name} ({', '.join(t.devices)})" for t in report.targets if t.available]
    parts += [f"{t.name} (compile only)" for t in report.targets if not t.available and t.can_compile]
    return Text(f"targets: {', '.join(parts) or 'none available here'}")


def cmd_serve(args) -> int:
    from kforge_mcp.http_transport import TOKEN_ENV

    args.token = args.token or args.settings.http_token
    if args.transport == "http" and not is_loopback(args.host) and not args.token:
        raise KforgeError(
            f"refusing to listen on non-loopback host '{args.host}' without authentication: the server "
            f"runs submitted code; set a bearer token with --token or ${TOKEN_ENV}"
        )
    if not sys.stderr.isatty():  # a host's log file: one record per line (rich wraps at 80 columns)
        logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    interrupted = False
    with open_engine(args.home, args.allow_dir or [os.getcwd()], args=args) as engine:
        # the probe starts before the MCP server's imports (~0.8 s), so a fresh home's first
        # list_targets finds it further on (a probed home answers from the last one at once)
        threading.Thread(target=quietly(lambda: warm_up(engine)), daemon=True, name="kforge-probe").start()
        from kforge_mcp.server import build_server

        server = build_server(engine)
        banner(args, engine)
        try:
            if args.transport == "stdio":
                import anyio

                from kforge_mcp import stdio_transport

                anyio.run(stdio_transport.run, server, int(args.max_request_mb * 2**20))
            else:
                from kforge_mcp import http_transport

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
        "--max-request-mb",
        type=float,
        default=4.0,
        metavar="MB",
        help="largest request accepted, HTTP body or stdio line (default 4)",
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
