"""How long a newcomer's first verify takes: `kforge verify` of each example's Triton candidate
(the CPU interpreter here), as the README's first commands leave things: a fresh KFORGE_HOME (no
Triton, inductor or compile caches), default options (5 trials, eager and torch.compile baselines).

    .venv/bin/python bench/first_verify.py [--out bench/results/first-verify] [--repeat 2] [--note TEXT]

Each example is verified --repeat times in a row in new processes on the same home: the first
pays for the worker's start, torch.compile of the reference and Triton's first compile; later
ones find the caches. Wall time of the whole command, as the user waits for it. Writes
cpu.json and cpu.md to --out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KFORGE = Path(sys.executable).parent / "kforge"
EXAMPLES = ("row_softmax", "fused_bias_gelu", "gemm_bias_relu")


def verify_once(home: Path, name: str) -> dict:
    cmd = [
        str(KFORGE),
        "verify",
        f"examples/problems/{name}.py",
        f"examples/candidates/{name}/triton.py",
        "--target",
        "triton",
        "--json",
    ]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "KFORGE_HOME": str(home)}, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    report = json.loads(done.stdout) if done.returncode == 0 else {}
    return {
        "example": name,
        "seconds": round(seconds, 2),
        "exit": done.returncode,
        "verdict": report.get("verdict"),
        "speedup_over": report.get("speedup_over"),
        "stderr_tail": done.stderr[-300:] if done.returncode else "",
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "first-verify"))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    runs = []
    for name in EXAMPLES:
        with tempfile.TemporaryDirectory(prefix="kforge-first-verify-") as home:
            for i in range(args.repeat):
                run = {**verify_once(Path(home), name), "nth": i + 1}
                print(json.dumps(run), flush=True)
                runs.append(run)
    meta = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "command": "kforge verify examples/problems/NAME.py examples/candidates/NAME/triton.py --target triton --json",
        "note": args.note,
    }
    out = Path(args.out)
    (out / "cpu.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1) + "\n")
    lines = [
        "# First verify on the CPU machine",
        "",
        f"{meta['date']}, {meta['cpus']} cores, Python {meta['python']}; `python bench/first_verify.py`.",
        f"Command: `{meta['command']}` (defaults: 5 trials, eager and torch.compile baselines), each example",
        "on a fresh KFORGE_HOME, then again in a new process on the same home. Wall time of the command.",
        "",
        "| example | run | seconds | verdict |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r['example']} | {r['nth']} | {r['seconds']:.1f} | {r['verdict'] or 'exit ' + str(r['exit'])} |"
        for r in runs
    ]
    if args.note:
        lines += ["", args.note]
    (out / "cpu.md").write_text("\n".join(lines) + "\n")
    return 0 if all(r["exit"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
