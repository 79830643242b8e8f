"""Where a warm verify's time goes, function by function: one problem and candidate verified in this
process (no worker, no server) a few times; the last run under cProfile. Prints each run's phases
(``VerifyReport.phases``) and the functions with the most cumulative time in the profiled run.

    python bench/verify_profile.py --target cuda --candidate examples/candidates/fused_bias_gelu/cuda.py
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", default=str(ROOT / "examples/problems/fused_bias_gelu.py"))
    ap.add_argument("--candidate", default=str(ROOT / "examples/candidates/fused_bias_gelu/triton.py"))
    ap.add_argument("--target", default="triton")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--top", type=int, default=45)
    ap.add_argument("--out", help="JSON of every run's phases")
    args = ap.parse_args()
    from kforge_mcp.core.requests import VerifyRequest
    from kforge_mcp.core.settings import Settings
    from kforge_mcp.core.source import Source
    from kforge_mcp.judge.baselines import BaselineCache
    from kforge_mcp.judge.verify import run_verify

    def wire(path: str) -> dict:
        return Source(text=Path(path).read_text(), name=path).to_wire()

    req = {
        "problem": wire(args.problem),
        "candidate": wire(args.candidate),
        "target": args.target,
        "device": args.device,
        "trials": 5,
        "baselines": ["eager", "compiled"],
        "timing_budget_s": 1.0,
    }
    cache, runs = BaselineCache(), []
    memory_mb = Settings.read().worker_memory_mb  # the worker's limit, as a worker reads it
    workdir = Path(tempfile.mkdtemp(prefix="kforge-verify-profile-"))
    profiler = cProfile.Profile()
    for i in range(args.runs):
        last = i == args.runs - 1
        started = time.perf_counter()
        if last:
            profiler.enable()
        (workdir / str(i)).mkdir()
        report = run_verify(
            VerifyRequest.model_validate(req), lambda *_a, **_k: None, workdir / str(i), cache, memory_mb
        )
        if last:
            profiler.disable()
        wall = time.perf_counter() - started
        runs.append({"run": i, "wall_s": round(wall, 3), "verdict": report.verdict, "phases": report.phases})
        print(json.dumps(runs[-1]), flush=True)
        if report.errors:
            print("  errors:", report.errors[:2])
        if report.timing:
            print("  samples", {k: v["samples"] for k, v in report.timing.model_dump().items() if isinstance(v, dict)})
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(args.top)
    print(text.getvalue())
    if args.out:
        Path(args.out).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
