"""Load on the streamable HTTP transport: a real `kforge serve --transport http` subprocess (its own
KFORGE_HOME, a free port, a bearer token) and several real MCP clients (the SDK's streamable HTTP
client) that issue concurrent tool calls, while the server's memory is sampled from /proc.

    .venv/bin/python bench/load_http.py [--clients 5] [--calls 50] [--rounds 2] [--out bench/results/load-http] [--note TEXT]

Each round fires all ``--calls`` calls at once, spread over ``--clients`` sessions: list_targets,
compile of the example candidates (first calls and cache hits), verify of a small problem on the
CPU Triton interpreter, analyze_profile of captured profiles in tests/data/profiles, and job_status
of a verify job started just before the burst. Counts errors (a tool error or an exception is an
error), reports p50/p95/max latency per tool and the wall time, and the resident memory of the
server and its workers (sum of RSS over the process tree): at baseline (after a warm-up that starts
both workers), peak during each round, and some seconds after. Writes cpu.json and cpu.md under --out.

The server subprocess and its memory sampler are tests/http_server.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from http_server import MemorySampler, ServerProcess  # noqa: E402  (the server subprocess the tests use too)

PROFILES = ROOT / "tests" / "data" / "profiles"
VECTOR_ADD = (str(ROOT / "bench/problems/vector_add.py"), str(ROOT / "bench/candidates/vector_add/triton.py"))
COMPILE_SOURCES = [
    (str(ROOT / f"examples/candidates/{p}/{c}.py"), str(ROOT / f"examples/problems/{p}.py"))
    for p in ("row_softmax", "fused_bias_gelu", "gemm_bias_relu")
    for c in ("triton", "triton_naive")
] + [(VECTOR_ADD[1], VECTOR_ADD[0])]
PROFILE_FILES = [
    "fused_bias_gelu-triton.ncu-raw.csv",
    "fused_bias_gelu-reference.torch-trace.json",
    "fused_bias_gelu-triton.proton.hatchet",
    "fused_bias_gelu-reference.ncu-details.csv",
]


# ---- the load ----


def plan(calls: int, job_id: str | None, cheap: bool = False) -> list[tuple[str, dict]]:
    """``calls`` tool calls in a fixed mix. cheap: no verify (for the quick test)."""
    kinds: list[tuple[str, dict]] = []
    i = 0
    while len(kinds) < calls:
        slot = i % 10
        if slot in (0, 5):
            kinds.append(("list_targets", {}))
        elif slot in (1, 6):
            source, problem = COMPILE_SOURCES[(i // 10 + slot) % len(COMPILE_SOURCES)]
            kinds.append(("compile", {"target": "triton", "source": source, "problem": problem}))
        elif slot in (2, 7):
            path = PROFILE_FILES[(i // 10 + slot) % len(PROFILE_FILES)]
            kinds.append(("analyze_profile", {"path": str(PROFILES / path)}))
        elif slot == 3 and not cheap:
            kinds.append(
                (
                    "verify",
                    {
                        "problem": VECTOR_ADD[0],
                        "candidate": VECTOR_ADD[1],
                        "target": "triton",
                        "trials": 1,
                        "baselines": ["eager"],
                        "wait_s": 600,
                    },
                )
            )
        elif job_id is not None:
            kinds.append(("job_status", {"job_id": job_id}))
        else:
            kinds.append(("list_targets", {}))
        i += 1
    return kinds


async def timed_call(client, tool: str, args: dict) -> dict:
    t0 = time.perf_counter()
    try:
        result = await client.call_tool(tool, args)
        error = result.content[0].text[:300] if result.is_error else None
        if error is None and tool == "verify" and result.structured_content.get("verdict") != "pass":
            error = f"verdict {result.structured_content.get('verdict')}: {result.structured_content.get('errors')}"
        if error is None and tool == "compile" and not result.structured_content.get("ok"):
            error = f"compile not ok: {result.structured_content.get('diagnostics')}"
    except Exception as e:  # noqa: BLE001  (a transport failure is an error of the run, counted)
        error = f"{type(e).__name__}: {e}"[:300]
    return {"tool": tool, "seconds": time.perf_counter() - t0, "error": error}


async def burst(server: ServerProcess, clients: int, calls: int, cheap: bool = False) -> dict:
    """One round: ``clients`` sessions, ``calls`` calls fired at once across them."""
    async with _Sessions(server, clients) as sessions:
        job_id = None
        started_job = None
        if not cheap:  # a verify job started just before the burst, for job_status to poll
            r = await sessions[0].call_tool(
                "verify",
                {
                    "problem": VECTOR_ADD[0],
                    "candidate": VECTOR_ADD[1],
                    "target": "triton",
                    "trials": 1,
                    "baselines": ["eager"],
                    "wait_s": 0,
                },
            )
            job_id = r.structured_content.get("job_id")
            started_job = {"tool": "verify (wait_s=0)", "error": r.content[0].text[:300] if r.is_error else None}
        work = plan(calls - (1 if started_job else 0), job_id, cheap)
        t0 = time.perf_counter()
        results = await asyncio.gather(
            *(timed_call(sessions[i % clients], tool, args) for i, (tool, args) in enumerate(work))
        )
        wall = time.perf_counter() - t0
        if job_id:  # let the started job finish before the round ends
            for _ in range(20):
                r = await sessions[0].call_tool("job_result", {"job_id": job_id, "wait_s": 30})
                if r.is_error or r.structured_content.get("status") not in ("queued", "running"):
                    break
            info = {} if r.is_error else r.structured_content
            if r.is_error or (info.get("result") or {}).get("verdict") != "pass":
                started_job["error"] = (r.content[0].text if r.is_error else str(info))[:300]
    if started_job:
        results.append({**started_job, "seconds": 0.0})
    return {"wall_s": wall, "calls": results}


class _Sessions:
    def __init__(self, server: ServerProcess, n: int):
        self.cms = [server.client() for _ in range(n)]

    async def __aenter__(self):
        self.sessions = [await cm.__aenter__() for cm in self.cms]
        return self.sessions

    async def __aexit__(self, *exc):
        for cm in reversed(self.cms):
            await cm.__aexit__(*exc)


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def per_tool(calls: list[dict]) -> dict:
    out = {}
    for tool in sorted({c["tool"] for c in calls}):
        secs = [c["seconds"] for c in calls if c["tool"] == tool]
        out[tool] = {
            "n": len(secs),
            "errors": sum(1 for c in calls if c["tool"] == tool and c["error"]),
            "p50_s": statistics.median(secs),
            "p95_s": percentile(secs, 0.95),
            "max_s": max(secs),
        }
    return out


async def warm_up(server: ServerProcess, verify: bool = True) -> None:
    """Start the workers (compile, and cpu unless verify=False) so the baseline includes them."""
    async with server.client() as c:
        await c.call_tool("list_targets", {})
        if verify:
            await c.call_tool(
                "verify",
                {
                    "problem": VECTOR_ADD[0],
                    "candidate": VECTOR_ADD[1],
                    "target": "triton",
                    "trials": 1,
                    "baselines": ["eager"],
                    "wait_s": 600,
                },
            )


def run_load(
    home: Path,
    clients: int,
    calls: int,
    rounds: int = 1,
    cheap: bool = False,
    settle_s: float = 5.0,
    server_env: dict | None = None,
) -> dict:
    server = ServerProcess(home, env=server_env).start()
    sampler = MemorySampler(server.proc.pid).start()
    try:
        t0 = time.monotonic()
        asyncio.run(warm_up(server, verify=not cheap))
        time.sleep(1.0)
        baseline = sampler.peak_between(time.monotonic() - 0.5, time.monotonic())
        out = {"startup_and_warm_up_s": time.monotonic() - t0, "baseline": baseline, "rounds": []}
        for _ in range(rounds):
            r0 = time.monotonic()
            result = asyncio.run(burst(server, clients, calls, cheap))
            r1 = time.monotonic()
            time.sleep(settle_s)
            after = sampler.peak_between(time.monotonic() - 0.5, time.monotonic())
            errors = [c for c in result["calls"] if c["error"]]
            out["rounds"].append(
                {
                    "wall_s": result["wall_s"],
                    "calls": len(result["calls"]),
                    "errors": len(errors),
                    "error_samples": errors[:5],
                    "per_tool": per_tool(result["calls"]),
                    "peak": sampler.peak_between(r0, r1),
                    "after": after,
                }
            )

        async def still_serving() -> bool:
            async with server.client() as c:
                return not (await c.call_tool("list_targets", {})).is_error

        out["still_serving"] = asyncio.run(still_serving())
        out["server_alive"] = server.proc.poll() is None
    finally:
        sampler.stop()
        server.stop()
    return out


# ---- report ----


def machine() -> dict:
    import importlib.metadata as md

    versions = {}
    for dist in ("torch", "triton", "mcp", "kforge-mcp"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            versions[dist] = "-"
    return {
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
        "load_average": os.getloadavg(),
    }


def write_report(out_dir: Path, data: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "cpu.json").write_text(json.dumps(data, indent=1) + "\n")
    m, r = data["machine"], data["result"]
    lines = [
        "# kforge under concurrent load over streamable HTTP (CPU, Triton interpreter)",
        "",
        f"- machine: {m['cores']} cores, {m['platform']}, Python {m['python']}, "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
        f"- date: {data['date']}; load average at start {tuple(round(x, 2) for x in m['load_average'])}, "
        f"at end {tuple(round(x, 2) for x in data['load_average_end'])}",
        f"- command: `{data['command']}`",
    ]
    if data.get("note"):
        lines.append(f"- note: {data['note']}")
    lines += [
        "",
        f"A real `kforge serve --transport http` subprocess (own KFORGE_HOME, bearer token) and "
        f"{data['clients']} MCP clients (SDK streamable HTTP client, one session each); each round fires "
        f"{data['calls']} tool calls at once, spread over the sessions. Memory: resident set of the "
        f"server process and of its whole tree (server + compile worker + cpu worker), sampled every 0.1 s "
        f"from /proc; 'after' is {data['settle_s']:g} s after the round.",
        "",
        f"Startup and warm-up (server start, first list_targets, first verify): {r['startup_and_warm_up_s']:.1f} s. "
        f"Baseline after warm-up: server {r['baseline']['server_mb']:.0f} MB, tree {r['baseline']['tree_mb']:.0f} MB "
        f"({r['baseline']['processes']} processes).",
        "",
    ]
    for n, rd in enumerate(r["rounds"], 1):
        lines += [
            f"## Round {n}: {rd['calls']} calls, {rd['errors']} errors, wall {rd['wall_s']:.1f} s",
            "",
            "| tool | calls | errors | p50 s | p95 s | max s |",
            "|---|---|---|---|---|---|",
        ]
        for tool, t in rd["per_tool"].items():
            lines.append(
                f"| {tool} | {t['n']} | {t['errors']} | {t['p50_s']:.3f} | {t['p95_s']:.3f} | {t['max_s']:.3f} |"
            )
        lines += [
            "",
            f"Memory: peak server {rd['peak']['server_mb']:.0f} MB, tree {rd['peak']['tree_mb']:.0f} MB "
            f"({rd['peak']['processes']} processes); after: server {rd['after']['server_mb']:.0f} MB, tree "
            f"{rd['after']['tree_mb']:.0f} MB.",
            "",
        ]
        for e in rd["error_samples"]:
            lines.append(f"- error in {e['tool']}: {e['error']}")
    b = data["bound"]
    lines += [
        "## Verdict",
        "",
        f"- errors: {sum(rd['errors'] for rd in r['rounds'])} of {sum(rd['calls'] for rd in r['rounds'])} calls",
        f"- bounded memory: peak tree RSS {b['peak_tree_mb']:.0f} MB against a bound of {b['bound_mb']:.0f} MB "
        f"(baseline + {b['headroom_mb']:.0f} MB): {'within' if b['within'] else 'OVER'}; "
        f"after the last round {b['after_tree_mb']:.0f} MB, {b['after_over_baseline_mb']:+.0f} MB over baseline",
        "- after each round (tree): "
        + ", ".join(f"{rd['after']['tree_mb']:.0f} MB" for rd in r["rounds"])
        + f"; from the first round to the last: {r['rounds'][-1]['after']['tree_mb'] - r['rounds'][0]['after']['tree_mb']:+.0f} MB",
        f"- the server still serves afterwards: {r['still_serving']}",
        "",
    ]
    (out_dir / "cpu.md").write_text("\n".join(lines))


HEADROOM_MB = 1024.0  # what a burst may add over the warm baseline (parsing, job threads, torch tensors)


def bound(result: dict) -> dict:
    base = result["baseline"]["tree_mb"]
    peak = max(rd["peak"]["tree_mb"] for rd in result["rounds"])
    after = result["rounds"][-1]["after"]["tree_mb"]
    return {
        "baseline_tree_mb": base,
        "headroom_mb": HEADROOM_MB,
        "bound_mb": base + HEADROOM_MB,
        "peak_tree_mb": peak,
        "within": peak <= base + HEADROOM_MB,
        "after_tree_mb": after,
        "after_over_baseline_mb": after - base,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=5)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--settle-s", type=float, default=5.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "load-http"))
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    info = machine()
    with tempfile.TemporaryDirectory(prefix="kforge-load-") as tmp:
        result = run_load(Path(tmp) / "home", args.clients, args.calls, args.rounds, settle_s=args.settle_s)
    data = {
        "date": date,
        "machine": info,
        "load_average_end": os.getloadavg(),
        "command": shlex.join([".venv/bin/python", "bench/load_http.py", *sys.argv[1:]]),
        "note": args.note,
        "clients": args.clients,
        "calls": args.calls,
        "settle_s": args.settle_s,
        "result": result,
        "bound": bound(result),
    }
    write_report(Path(args.out), data)
    print((Path(args.out) / "cpu.md").read_text())
    errors = sum(rd["errors"] for rd in result["rounds"])
    sys.exit(0 if errors == 0 and data["bound"]["within"] and result["still_serving"] else 1)


if __name__ == "__main__":
    main()
