"""Parameters that do not change the output (judge/structure/cancelled.py), on KernelBench Level 2 problems.

For each problem, the reference's levers as the CPU worker that measures the paths reads them
(``reference_levers(problem, "cpu", ...)``): the parameters found cancelled, the nodes they feed, the FLOPs and
bytes the lever saves, the check's own seconds (wall, this process), or why it was not checked.

    python bench/cancelled_parameters.py --out bench/results/cancelled-parameters/cpu-level2.json
    python bench/cancelled_parameters.py --problems 15 17 73 --out /tmp/some.json

Problems come from a KernelBench checkout (bench/paths_budget.py's ``--kernelbench``, read with git).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from paths_budget import KERNELBENCH, problem_file  # noqa: E402


def one(name: str, kernelbench: Path, tmp: Path) -> dict:
    import kforge_mcp.judge.structure as structure
    from kforge_mcp.core.problem import Source, load_problem
    from kforge_mcp.judge.roofline import reference_roofline

    spent: dict[str, float] = {}
    check = structure.cancelled_levers

    def timed(*args):
        started = time.perf_counter()
        try:
            return check(*args)
        finally:
            spent["s"] = round(time.perf_counter() - started, 2)

    structure.cancelled_levers = timed
    try:
        path = problem_file(name, kernelbench, tmp)
        problem = load_problem(Source(text=path.read_text(), name=path.name), tmp)
        roof = structure.reference_levers(problem, "cpu", reference_roofline(problem, "cpu", "H100"))
    finally:
        structure.cancelled_levers = check
    lever = next((lv for lv in roof.levers if lv.kind == "cancelled_parameters"), None)
    return {
        "problem": path.name,
        "cancelled": lever.evidence["parameters"] if lever else None,
        "nodes": lever.nodes if lever else [],
        "flops_saved": lever.flops_saved if lever else 0.0,
        "bytes_saved": lever.bytes_saved if lever else 0.0,
        "check_s": spent.get("s"),
        "not_checked": next((n for n in roof.notes if n.startswith("cancelled parameters not checked")), None),
    }


def markdown(result: dict) -> str:
    rows = result["problems"]
    found = [r for r in rows if r["cancelled"]]
    skipped = [r for r in rows if r["not_checked"]]
    seconds = [r["check_s"] for r in rows if r["check_s"] is not None]
    lines = [
        f"# Parameters that do not change the output ({result['machine']})",
        "",
        f"`{result['command']}`; {result['when']}; code {result['commit']}.",
        "",
        f"{len(rows)} problems: {len(found)} with cancelled parameters, {len(skipped)} not checked, the rest checked "
        f"with none. The check's wall time: median {statistics.median(seconds):.2f} s, at most {max(seconds):.2f} s."
        if seconds
        else f"{len(rows)} problems.",
        "",
        "| problem | cancelled | nodes | FLOPs saved | bytes saved | check (s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in found:
        lines.append(
            f"| {r['problem']} | {r['cancelled']} | {', '.join(r['nodes']) or '-'} | {r['flops_saved']:.3g} "
            f"| {r['bytes_saved']:.3g} | {r['check_s']} |"
        )
    if skipped:
        lines += ["", "Not checked:", ""] + [f"- {r['problem']}: {r['not_checked']}" for r in skipped]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", nargs="*", default=[str(i) for i in range(1, 101)])
    ap.add_argument("--kernelbench", type=Path, default=KERNELBENCH)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.problems:
            rows.append(one(name, args.kernelbench, Path(tmp)))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    result = {
        "command": "python bench/cancelled_parameters.py " + " ".join(sys.argv[1:]),
        "when": time.strftime("%Y-%m-%d"),
        "machine": f"CPU, {platform.node()}",
        "commit": commit.stdout.strip(),
        "problems": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
