"""The ``kforge`` command line and the ``kforge-mcp`` server entry. The top floor: nothing in
kforge_mcp imports it.

main.py builds the parsers; commands.py, serve.py, bench.py and run_loop.py hold the verbs;
console.py and reports.py print."""

from kforge_mcp.cli.main import build_parser, main, read_settings, run, server_main

__all__ = ["build_parser", "main", "read_settings", "run", "server_main"]
