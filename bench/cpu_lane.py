"""A verify on a CPU of the Level 2 problems under bench/problems (*_l2.py) with their candidates, through Triton's
interpreter: `kforge verify` in a process of its own on a fresh home per problem (the worker's start, torch's import
and the torch.compile baseline included), wall seconds as a user waits them, the verdict, the shapes that ran, the
trials run and whether it was timed.

    .venv/bin/python bench/cpu_lane.py                                   # this checkout: label 'after'
    .venv/bin/python bench/cpu_lane.py --label before --code /tmp/main   # another checkout's kforge_mcp

Each problem gets the candidate the interpreter can run: its fp32 kernel (the bf16, fp8 and TMA steps compute
nothing right there). A problem's row is replaced when it runs again; bench/results/cpu-lane/cpu.json keeps every
label, cpu.md shows them side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "cpu-lane"
GOAL_S = 150.0


def candidate_for(problem: str) -> Path | None:
    """The problem's fp32 candidate: the interpreter computes nothing right in bf16, fp8 or through TMA."""
    folder = ROOT / "bench" / "candidates" / problem
    for name in ("step0_fp32.py", "step0_fp32_fma.py", "triton_3xtf32.py"):
        if (folder / name).is_file():
            return folder / name
    return None


def verify(problem: Path, candidate: Path, code: Path, timeout_s: float) -> dict:
    """`kforge verify` of ``candidate`` in a process of its own, on a fresh home; its report and wall seconds."""
    home = Path(tempfile.mkdtemp(prefix="kforge-cpu-lane-"))
    env = {**os.environ, "PYTHONPATH": str(code), "KFORGE_HOME": str(home)}
    command = [sys.executable, "-m", "kforge_mcp.cli", "verify", str(problem), str(candidate)]
    command += ["--target", "triton", "--device", "cpu", "--timeout", f"{timeout_s:g}", "--json"]
    load = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.run(command, env=env, cwd=code, capture_output=True, text=True, timeout=timeout_s + 120)
    wall = time.perf_counter() - started
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        return {"wall_s": round(wall, 1), "load": round(load, 2), "verdict": "none", "errors": [proc.stderr[-600:]]}
    findings = {f["code"]: f for f in report.get("findings", [])}
    budget = findings.get("interpreter_budget", {}).get("evidence", {})
    return {
        "wall_s": round(wall, 1),
        "load": round(load, 2),
        "verdict": report.get("verdict"),
        "seconds_in_worker": round(report.get("seconds") or 0.0, 1),
        "shapes": report.get("shapes", []),
        "published_shapes": report.get("published_shapes"),
        "trials": report.get("trials"),
        "timed": report.get("timing") is not None,
        "first_call_s": budget.get("first_call_s"),
        "phases": report.get("phases", {}),
        "findings": sorted(findings),
        "errors": [e[:600] for e in report.get("errors", [])],
    }


def render(record: dict) -> str:
    labels = sorted({label for row in record.values() for label in row})
    lines = [
        "# CPU lane: verify of the Level 2 problems through Triton's interpreter",
        "",
        f"`kforge verify` in a process of its own, a fresh home per problem; wall seconds (goal <= {GOAL_S:g} s), "
        "the load average when it started, the shapes the candidate ran (the published ones where they differ), "
        "trials run and whether it was timed. Command: `python bench/cpu_lane.py` (and `--label before --code DIR` "
        "for another checkout).",
        "",
        "| problem | label | verdict | wall s | load | shapes ran (published) | trials | timed | first call s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for problem, rows in sorted(record.items()):
        for label in labels:
            r = rows.get(label)
            if r is None:
                continue
            shapes = ", ".join(r.get("shapes") or []) or "-"
            if r.get("published_shapes"):
                shapes += f" ({', '.join(r['published_shapes'])})"
            lines.append(
                f"| {problem} | {label} | {r['verdict']} | {r['wall_s']} | {r['load']} | {shapes} | "
                f"{r.get('trials', '-')} | {'yes' if r.get('timed') else 'no'} | {r.get('first_call_s') or '-'} |"
            )
    errors = [
        f"- {problem} ({label}): {r['errors'][0]}"
        for problem, rows in sorted(record.items())
        for label, r in rows.items()
        if r.get("errors")
    ]
    return "\n".join(lines + (["", "Errors:", "", *errors] if errors else [])) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="after")
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose kforge_mcp runs")
    ap.add_argument("--problems", help="comma-separated names (default: every *_l2.py with a candidate)")
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()
    names = (
        args.problems.split(",")
        if args.problems
        else [p.stem for p in sorted((ROOT / "bench/problems").glob("*_l2.py"))]
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "cpu.json"
    record = json.loads(path.read_text()) if path.is_file() else {}
    for name in names:
        candidate = candidate_for(name)
        if candidate is None:
            print(f"{name}: no candidate the interpreter runs", flush=True)
            continue
        row = verify(ROOT / "bench" / "problems" / f"{name}.py", candidate, args.code.resolve(), args.timeout)
        row["candidate"] = candidate.name
        record.setdefault(name, {})[args.label] = row
        print(json.dumps({"problem": name, args.label: row}), flush=True)
        path.write_text(json.dumps(record, indent=1) + "\n")
        (RESULTS / "cpu.md").write_text(render(record))


if __name__ == "__main__":
    main()
