"""Where a profile at depth 'metrics' spends its time, phase by phase: a Level 2 candidate profiled through the
Engine (its workers, as the server runs them) on a fresh home, then again on the same engine (warm: the worker,
the Triton and autotune caches, the reference's roofline, the weight work and the measured compute paths kept).
With --then, other candidates follow on the same warm engine (a new kernel, as an agent's next round brings); with
--gap, that many seconds pass between profiles, as an agent's turn between them; with --verify-first, the candidate
is verified first, twice (the second's times come after the worker readied the profilers), as an agent does before
it profiles; with --serve-warm-up, what `kforge serve` does at its start runs first.
Each run prints the wall seconds the caller waited, the worker's own seconds and `report.phases` (build, warm_up,
timeline, weight_work, roofline, metrics: the wait for ncu after the worker's own steps, proton; paths_wait: the
engine's wait for the compute paths measured on the CPU meanwhile), and what ncu said.

    python bench/profile_phases.py --out bench/results/profile-phases/h100.json
    python bench/profile_phases.py --problem bench/problems/conv2d_subtract_tanh_subtract_avgpool_l2.py \\
        --candidate bench/candidates/conv2d_subtract_tanh_subtract_avgpool_l2/step0_fp32.py --out ...

Needs a GPU and ncu on PATH for the metrics phase (elsewhere it says why and times the rest).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "bench/problems/gemm_multiply_leakyrelu_l2.py"
CANDIDATE = ROOT / "bench/candidates/gemm_multiply_leakyrelu_l2/step1_bf16x3.py"


def paths_measured(home: Path) -> list[dict]:
    """The compute paths' measurements kept under ``home``: each one's own seconds in its worker (counting and
    loading the problem not included), where they went, its peak memory, or its failure."""
    kept = []
    for path in sorted((home / "cache" / "precision_paths").rglob("*.json")):
        m = json.loads(path.read_text())
        kept.append({k: m.get(k) for k in ("seconds", "phases", "peak_rss_bytes", "failure") if m.get(k) is not None})
    return kept


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", type=Path, default=PROBLEM)
    ap.add_argument("--candidate", type=Path, default=CANDIDATE)
    ap.add_argument("--target", default="triton")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--depth", default="metrics")
    ap.add_argument("--runs", type=int, default=3, help="the first on a fresh home, the others warm")
    ap.add_argument("--out", type=Path, help="JSON of every run")
    ap.add_argument(
        "--gap", type=float, default=0.0, help="seconds between profiles (an agent's turn: writing the next kernel)"
    )
    ap.add_argument(
        "--then", type=Path, nargs="*", default=[], help="other candidates, each profiled once on the warm engine after"
    )
    ap.add_argument(
        "--verify-first",
        action="store_true",
        help="verify the candidate on the fresh engine first, --gap seconds before its first profile (an agent's order)",
    )
    ap.add_argument(
        "--serve-warm-up",
        action="store_true",
        help="run what `kforge serve` runs at its start (cli/serve.py warm_up) first, --gap seconds before the first "
        "call (a client connecting, an agent reading the problem)",
    )
    args = ap.parse_args()
    from kforge_mcp.api import Engine

    home = Path(tempfile.mkdtemp(prefix="kforge-profile-phases-"))
    engine = Engine(home=home, allow_dirs=[ROOT, home])
    runs = []
    try:
        started = time.perf_counter()
        engine.list_targets()  # the probe, as a client's first call makes it
        print(json.dumps({"list_targets_s": round(time.perf_counter() - started, 2)}), flush=True)
        if args.serve_warm_up:
            from kforge_mcp.cli.serve import warm_up

            started = time.perf_counter()
            warm_up(engine)
            runs.append({"serve_warm_up_s": round(time.perf_counter() - started, 2)})
            print(json.dumps(runs[-1]), flush=True)
            time.sleep(args.gap)
        for again in range(2 if args.verify_first else 0):  # the second's times: after the profilers readied
            started = time.perf_counter()
            v = engine.verify(
                str(args.problem.resolve()), str(args.candidate.resolve()), target=args.target, device=args.device
            )
            timing = v.timing
            verified = {"verify": again, "wall_s": round(time.perf_counter() - started, 2), "verdict": v.verdict}
            for name in ("candidate", "eager"):
                stats = getattr(timing, name, None) if timing is not None else None
                verified[f"{name}_ms"] = stats.median_ms if stats is not None else None
            print(json.dumps(verified), flush=True)
            runs.append(verified)
            time.sleep(args.gap)
        candidates = [args.candidate] * args.runs + list(args.then)
        for i, candidate in enumerate(candidates):
            if i:
                time.sleep(args.gap)
            started = time.perf_counter()
            report = engine.profile(
                str(args.problem.resolve()),
                str(candidate.resolve()),
                target=args.target,
                device=args.device,
                depth=args.depth,
            )
            wall = time.perf_counter() - started
            run = {
                "run": i,
                "candidate": candidate.name,
                "gap_s": args.gap if i else 0.0,
                "warm": i > 0,
                "wall_s": round(wall, 2),
                "worker_s": round(report.seconds, 2),
                "phases": report.phases,
                # the worker's seconds no phase counted (loading the problem, reading the trace, the report)
                "unphased_s": round(
                    report.seconds
                    - sum(
                        v
                        for k, v in report.phases.items()
                        if k != "paths_wait" and not k.startswith("metrics_profiler_")
                    ),
                    2,
                ),
                "paths_measured": paths_measured(home),
                "source": report.source,
                "kernels": len(report.device_kernels()),
                "errors": report.errors[:2],
                "notes": [n for n in report.notes if "ncu" in n.lower() or "nsight" in n.lower()][:3],
            }
            runs.append(run)
            print(json.dumps(run), flush=True)
    finally:
        engine.close()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        meta = {"problem": str(args.problem.resolve()), "candidate": str(args.candidate.resolve())}
        meta |= {"device": args.device, "depth": args.depth, "load": os.getloadavg()[0]}
        args.out.write_text(json.dumps({**meta, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
