"""Which instructions a candidate's kernels execute, by SASS opcode: Nsight Compute's per-opcode counts
(sass__inst_executed_per_opcode) of one forward, for finding what fills a kernel's issue slots.

    python bench/instruction_mix.py --out DIR PROBLEM.py CANDIDATE.py [PROBLEM.py CANDIDATE.py ...]

Runs each candidate once under ncu (a forward to warm up, then one profiled) and writes DIR/<candidate stem>.csv
(ncu's raw page) and DIR/summary.md: per kernel, its warp instructions and the opcodes that issued most of them.
Needs an NVIDIA GPU and ncu on PATH.
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METRICS = "sass__inst_executed_per_opcode,smsp__inst_executed.sum,gpu__time_duration.sum"

RUNNER = """
import importlib.util, sys, torch
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
problem, candidate = load(sys.argv[1], "problem"), load(sys.argv[2], "candidate")
torch.manual_seed(0)
ref = problem.Model(*problem.get_init_inputs()).cuda()
model = candidate.ModelNew(*problem.get_init_inputs()).cuda()
model.load_state_dict(ref.state_dict(), strict=False)
inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
with torch.no_grad():
    model(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    model(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
"""


def profile(problem: Path, candidate: Path, out: Path) -> Path:
    runner = out / "runner.py"
    runner.write_text(RUNNER)
    cmd = ["ncu", "--profile-from-start", "off", "--metrics", METRICS, "--print-metric-instances", "details"]
    cmd += ["--csv", "--page", "raw", sys.executable, str(runner), str(problem), str(candidate)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    target = out / f"{candidate.parent.name}-{candidate.stem}.csv"
    target.write_text(proc.stdout)
    if proc.returncode:
        print(proc.stderr[-2000:], file=sys.stderr)
    return target


def summary(path: Path, top: int = 12) -> list[str]:
    """Per kernel: time, warp instructions and its most executed opcodes with their share."""
    text = path.read_text()
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:])))[1:]  # the second row holds the units
    lines = []
    for row in rows:
        name = row.get("Kernel Name", "?")[:60]
        total = float((row.get("smsp__inst_executed.sum") or "0").replace(",", "") or 0)
        counts = {}  # ncu prints "total (OPCODE: n; OPCODE: n; ...)"
        value = row.get("sass__inst_executed_per_opcode") or ""
        for part in value[value.find("(") + 1 : value.rfind(")")].split(";"):
            op, _, n = part.strip().rpartition(" ")
            if op:
                counts[op.strip().rstrip(":=")] = float(n.replace(",", "") or 0)
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
        mix = ", ".join(f"{op} {100 * n / total:.1f}%" for op, n in ranked) if total else "?"
        lines.append(f"| {path.stem} | {name} | {row.get('gpu__time_duration.sum', '?')} | {total:.4g} | {mix} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("pairs", nargs="+", type=Path, help="PROBLEM.py CANDIDATE.py, repeated")
    args = ap.parse_args(argv)
    if len(args.pairs) % 2:
        ap.error("give each candidate after its problem")
    args.out.mkdir(parents=True, exist_ok=True)
    lines = [
        "| candidate | kernel | time (ns) | warp instructions | most executed opcodes (share of the instructions) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for problem, candidate in zip(args.pairs[::2], args.pairs[1::2], strict=True):
        lines += summary(profile(problem.resolve(), candidate.resolve(), args.out))
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
