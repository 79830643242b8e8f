"""Latency of kforge's MCP tools, measured through a real MCP client (in-memory transport).

    .venv/bin/python bench/latency.py [--out bench/results/latency] [--warm 5] [--note TEXT]

Measures: list_targets (cold, warm), verify (cold, warm, and the overhead of a warm verify
over the candidate's own run time, per set of baselines), and compile (first call, cache hit).
Writes cpu.json and cpu.md to --out; --note adds a line about the run (e.g. other load).
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

from mcp import Client

from kforge_mcp.api import Engine
from kforge_mcp.server import build_server

ROOT = Path(__file__).resolve().parent.parent
AIM_S = 0.5  # the aim: a warm verify of a small problem adds under 0.5 s over the candidate
PROBLEMS = {
    "vector_add": ("bench/problems/vector_add.py", "bench/candidates/vector_add/triton.py"),
    "row_softmax": ("examples/problems/row_softmax.py", "examples/candidates/row_softmax/triton.py"),
}
BASELINE_SETS = (["eager"], ["eager", "compiled"])
TRIALS = 5  # the verify tool's default


class TimedEngine(Engine):
    """Engine that timestamps verify's progress lines (seconds since Engine.verify began)."""

    phases: list[tuple[float, str]] = []

    def verify(self, *args, on_progress=None, **kwargs):
        started, self.phases = time.perf_counter(), []

        def progress(text: str) -> None:
            self.phases.append((round(time.perf_counter() - started, 4), text))
            if on_progress:
                on_progress(text)

        report = super().verify(*args, on_progress=progress, **kwargs)
        self.phases.append((round(time.perf_counter() - started, 4), "engine returned"))
        return report


async def call(client: Client, tool: str, args: dict) -> tuple[float, dict]:
    t0 = time.perf_counter()
    result = await client.call_tool(tool, args)
    seconds = time.perf_counter() - t0
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content}")
    return seconds, result.structured_content


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


PHASES = {
    "starting": "worker start",
    "loading": "load",
    "correctness": "trials",
    "timing candidate": "candidate timing",
    "timing eager": "eager baseline",
    "timing torch.compile": "compiled baseline",
}


def breakdown(phases: list[tuple[float, str]], wall: float) -> dict[str, float]:
    """Seconds per phase of one verify, from its progress timestamps; 'mcp' is what the
    client waited beyond Engine.verify (job thread, polling, transport)."""
    out, prev, label = {"server": 0.0}, 0.0, "server"
    for ts, text in phases:
        out[label] = out.get(label, 0.0) + ts - prev
        prev, label = ts, next((v for k, v in PHASES.items() if text.startswith(k)), text)
    out["mcp"] = wall - prev
    return {k: round(v, 4) for k, v in out.items()}


def verify_record(wall: float, report: dict, engine: TimedEngine) -> dict:
    """One verify call: wall time, the candidate's own run time, the overhead over it."""
    if report["verdict"] != "pass":
        raise RuntimeError(f"verify did not pass: {report['verdict']} {report['errors']} {report['mismatches']}")
    cand, trials = report["timing"]["candidate"], report["trials"]
    parts = breakdown(engine.phases, wall)
    calls = trials + cand["samples"] + 1  # correctness trials + timed samples + 1 warm-up
    candidate_s = calls * cand["median_ms"] / 1e3
    by_sum_s = ((trials + 1) * cand["median_ms"] + cand["samples"] * cand["mean_ms"]) / 1e3
    # the candidate-timing phase is the warm-up and the timed samples themselves: take it as measured
    phases_s = parts.get("candidate timing", 0.0) + trials * cand["median_ms"] / 1e3
    return {
        "wall_s": wall,
        "worker_s": report["seconds"],
        "timing": report["timing"],
        "findings": [f["code"] for f in report["findings"] if f["code"] != "interpreter_timing"],
        "candidate_calls": calls,
        "candidate_s": candidate_s,
        "overhead_s": wall - candidate_s,
        "overhead_by_sum_s": wall - by_sum_s,
        "overhead_phases_s": wall - phases_s,
        "breakdown": parts,
        "phases": engine.phases,
    }


async def bench_list_targets_and_compile(home: Path, warm: int) -> dict:
    engine = Engine(home=home)
    async with Client(build_server(engine)) as c:
        cold, _ = await call(c, "list_targets", {})
        warm_s = [(await call(c, "list_targets", {}))[0] for _ in range(warm)]
        problem, candidate = (str(ROOT / p) for p in PROBLEMS["vector_add"])
        args = {"target": "triton", "source": candidate, "problem": problem}
        first_s, first = await call(c, "compile", args)
        second_s, second = await call(c, "compile", args)
    engine.close()
    return {
        "list_targets": {"cold_s": cold, "warm_median_s": median(warm_s), "warm_s": warm_s},
        "compile": {
            "first_s": first_s,
            "first_ok": first["ok"],
            "first_cached": first["cached"],
            "second_s": second_s,
            "second_cached": second["cached"],
            "kernels": [k["name"] for k in first["kernels"]],
        },
    }


async def bench_verify(home: Path, warm: int) -> dict:
    engine = TimedEngine(home=home)
    out: dict = {}
    async with Client(build_server(engine)) as c:
        for name, (problem, candidate) in PROBLEMS.items():
            args = {
                "problem": str(ROOT / problem),
                "candidate": str(ROOT / candidate),
                "target": "triton",
                "device": "cpu",
                "trials": TRIALS,
            }
            # first verify of this problem: on a fresh server (the first problem) it starts both
            # workers and compiles the torch.compile baseline; later problems only pay the compile
            wall, report = await call(c, "verify", {**args, "baselines": ["eager", "compiled"]})
            out[name] = {"first": verify_record(wall, report, engine)}
            for baselines in BASELINE_SETS:
                runs = []
                for _ in range(warm):
                    wall, report = await call(c, "verify", {**args, "baselines": baselines})
                    runs.append(verify_record(wall, report, engine))
                out[name]["+".join(baselines)] = {
                    "wall_median_s": median([r["wall_s"] for r in runs]),
                    "candidate_median_s": median([r["candidate_s"] for r in runs]),
                    "overhead_median_s": median([r["overhead_s"] for r in runs]),
                    "overhead_by_sum_median_s": median([r["overhead_by_sum_s"] for r in runs]),
                    "overhead_phases_median_s": median([r["overhead_phases_s"] for r in runs]),
                    "breakdown_median_s": {
                        k: median([r["breakdown"].get(k, 0.0) for r in runs]) for k in runs[0]["breakdown"]
                    },
                    "findings": sorted({f for r in runs for f in r["findings"]}),
                    "runs": runs,
                }
    engine.close()
    return out


def machine() -> dict:
    from importlib.metadata import version

    return {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": version("torch"),
        "triton": version("triton"),
        "mcp": version("mcp"),
        "kforge_mcp": version("kforge-mcp"),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "loadavg_start": os.getloadavg(),
    }


def markdown(res: dict) -> str:
    m, lt, cp = res["machine"], res["list_targets"], res["compile"]
    lines = [
        "# kforge latency (CPU, Triton interpreter)",
        "",
        f"- machine: {m['nproc']} cores, {m['platform']}, Python {m['python']}, torch {m['torch']}, "
        f"triton {m['triton']}, mcp {m['mcp']}, kforge-mcp {m['kforge_mcp']}",
        f"- date: {m['date']}; load average at start {m['loadavg_start']}, at end {m['loadavg_end']}",
        f"- command: `{res['command']}`",
        *([f"- note: {res['note']}"] if res["note"] else []),
        "",
        "All times are wall seconds seen by an MCP client (in-memory transport) unless noted.",
        "",
        "| call | seconds |",
        "|---|---|",
        f"| list_targets, cold (starts the compile worker, imports torch) | {lt['cold_s']:.3f} |",
        f"| list_targets, warm (median of {len(lt['warm_s'])}) | {lt['warm_median_s']:.4f} |",
        f"| compile vector_add, first (cached={cp['first_cached']}) | {cp['first_s']:.3f} |",
        f"| compile vector_add, again (cached={cp['second_cached']}) | {cp['second_s']:.4f} |",
        "",
        "## verify (trials=5, timing budget 1 s per timed callable: the tool's defaults)",
        "",
        "overhead = verify wall time - (trials + timing samples + 1 warm-up) x candidate median_ms. "
        "'by sum' counts the timed samples by their sum (mean x n) instead; 'phases' takes the candidate-timing phase "
        "as measured (warm-up + samples) and estimates only the correctness calls (trials x median). With few, slow "
        "interpreted calls (row_softmax: ~1 s each, 3 samples) the estimates err by up to ~1 s either way; "
        "the phase table below is the direct measure.",
        "",
        "| problem | call | wall | candidate | overhead | overhead by sum | overhead (phases) | findings |",
        "|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for name, v in res["verify"].items():
        f = v["first"]
        lines.append(
            f"| {name} | first verify ({'fresh server' if name == 'vector_add' else 'warm server, new problem'}),"
            f" eager+compiled | {f['wall_s']:.3f} | {f['candidate_s']:.3f} | {f['overhead_s']:.3f} |"
            f" {f['overhead_by_sum_s']:.3f} | {f['overhead_phases_s']:.3f} | {', '.join(f['findings'])} |"
        )
        for key in ("+".join(b) for b in BASELINE_SETS):
            w = v[key]
            lines.append(
                f"| {name} | warm, {key} (median of {len(w['runs'])}) | {w['wall_median_s']:.3f} |"
                f" {w['candidate_median_s']:.3f} | {w['overhead_median_s']:.3f} |"
                f" {w['overhead_by_sum_median_s']:.3f} | {w['overhead_phases_median_s']:.3f} | {', '.join(w['findings'])} |"
            )
            ok = w["overhead_median_s"] < AIM_S
            missing = "compiled" in key and any(r["timing"].get("compiled") is None for r in w["runs"])
            verdicts.append(
                f"- {name}, {key}: overhead {w['overhead_median_s']:.3f} s median, "
                f"{max(r['overhead_s'] for r in w['runs']):.3f} s worst of {len(w['runs'])} "
                f"(phases: {w['overhead_phases_median_s']:.3f} s median) -> "
                f"{'holds' if ok else 'does NOT hold'}"
                + (
                    " (but the torch.compile baseline was NOT timed on warm calls: "
                    "finding compiled_baseline_unavailable, so this number leaves out its cost)"
                    if missing
                    else ""
                )
            )
    lines += [
        "",
        "## Where a warm verify's time goes (median seconds per phase, from progress timestamps)",
        "",
        "server: argument checks and IPC before the worker's first progress line (on a fresh server it includes "
        "the target probe, which starts the compile worker); worker start: the cpu worker (imports torch); load: problem and candidate "
        "import and model build; trials: correctness (candidate + reference + compare); mcp: client wait "
        "beyond Engine.verify.",
        "",
    ]
    keys = [
        "server",
        "worker start",
        "load",
        "trials",
        "candidate timing",
        "eager baseline",
        "compiled baseline",
        "mcp",
    ]
    lines += ["| problem | call | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
    for name, v in res["verify"].items():
        rows = [("first call, eager+compiled", v["first"]["breakdown"])]
        rows += [(f"warm, {key}", v[key]["breakdown_median_s"]) for key in ("+".join(b) for b in BASELINE_SETS)]
        for label, b in rows:
            lines.append(f"| {name} | {label} | " + " | ".join(f"{b.get(k, 0.0):.3f}" for k in keys) + " |")
    lines += [
        "",
        f"## Aim: a warm verify of a small problem adds under {AIM_S} s over the candidate's own run time",
        "",
    ]
    lines += verdicts
    lines += ["", "Per-call phase timestamps (seconds since Engine.verify began) are in the JSON, under `phases`."]
    return "\n".join(lines) + "\n"


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "latency"))
    p.add_argument("--warm", type=int, default=5, help="warm verify calls per problem and baseline set")
    p.add_argument("--warm-list", type=int, default=10, help="warm list_targets calls")
    p.add_argument("--note", default="", help="a line about the run for the summary, e.g. other load on the machine")
    args = p.parse_args()
    res = {
        "machine": machine(),
        "command": shlex.join([os.path.relpath(sys.executable, ROOT), *sys.argv]),
        "note": args.note,
    }
    with tempfile.TemporaryDirectory(prefix="kforge-bench-") as tmp:
        res.update(await bench_list_targets_and_compile(Path(tmp) / "a", args.warm_list))
        res["verify"] = await bench_verify(Path(tmp) / "b", args.warm)
    res["machine"]["loadavg_end"] = os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu.json").write_text(json.dumps(res, separators=(",", ":")))
    (out / "cpu.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    asyncio.run(main())
