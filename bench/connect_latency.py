"""connect + list_targets through MCP (the real server over stdio, the SDK's client), on fresh homes
and on a home probed before, several times each: what a host waits for before its first tool. Then
where a fresh home's wait goes: the probe's steps timed in a fresh process as the worker runs them
(import torch, device discovery, each target's probe), and the server's own imports.

    python bench/connect_latency.py --repeats 3 --out bench/results/connect-latency/cpu.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client, StdioServerParameters

STEPS = r"""
import json, time
t = time.perf_counter(); times = {}
def mark(name):
    global t
    now = time.perf_counter(); times[name] = round(now - t, 3); t = now
import torch; mark("import torch")
from kforge_mcp.devices.device import discover; from kforge_mcp.targets import TARGETS; mark("import kforge targets")
devices, _ = discover(); mark("discover devices")
for name, target in TARGETS.items():
    target.probe(devices); mark(f"probe {name}")
print("RESULT " + json.dumps(times))
"""

SERVER_START = "import time; t = time.perf_counter(); import kforge_mcp.cli.main; from kforge_mcp.api import Engine; "
SERVER_START += "from kforge_mcp.server import build_server; print('RESULT', round(time.perf_counter() - t, 3))"


def run(code: str) -> tuple[str, float]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(out.stdout + out.stderr)
    return line[len("RESULT ") :], time.perf_counter() - t0


async def connect_and_list(home: str) -> dict:
    env = {**os.environ, "KFORGE_HOME": home}
    params = StdioServerParameters(command=sys.executable, args=["-m", "kforge_mcp.cli", "serve"], env=env)
    t0 = time.perf_counter()
    async with Client(params, mode="legacy") as client:
        connected = time.perf_counter()
        res = await client.call_tool("list_targets", {})
        done = time.perf_counter()
    available = [t["name"] for t in (res.structured_content or {}).get("targets", []) if t.get("available")]
    return {
        "connect_s": connected - t0,
        "list_targets_s": done - connected,
        "total_s": done - t0,
        "available": available,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows = []
    probed = tempfile.mkdtemp(prefix="kforge-connect-probed-")
    first = asyncio.run(connect_and_list(probed))  # probes it; the first start on this machine, cold caches
    print(f"first start of all: {first['total_s']:.2f} s", flush=True)
    for i in range(args.repeats):
        for kind, home in (("fresh home", tempfile.mkdtemp(prefix="kforge-connect-")), ("home probed before", probed)):
            row = {"kind": kind, "run": i + 1, **asyncio.run(connect_and_list(home))}
            rows.append(row)
            print(
                f"{kind} #{i + 1}: connect {row['connect_s']:.2f} s + list_targets {row['list_targets_s']:.2f} s "
                f"= {row['total_s']:.2f} s  available: {', '.join(row['available'])}",
                flush=True,
            )
    summary = {
        kind: {
            "median_s": statistics.median(r["total_s"] for r in rows if r["kind"] == kind),
            "max_s": max(r["total_s"] for r in rows if r["kind"] == kind),
        }
        for kind in ("fresh home", "home probed before")
    }
    print(json.dumps(summary))
    profile = []
    for _ in range(args.repeats):
        steps, wall = run(STEPS)
        imports, server_wall = run(SERVER_START)
        profile.append({"probe_steps_s": json.loads(steps), "probe_process_wall_s": round(wall, 3)})
        profile[-1].update(server_imports_s=float(imports), server_import_process_wall_s=round(server_wall, 3))
        print(json.dumps(profile[-1]), flush=True)
    record = {"first_start": first, "rows": rows, "summary": summary, "fresh_home_profile": profile}
    Path(args.out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
