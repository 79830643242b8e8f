"""CUDA candidates verified per minute by verify_batch on one GPU: distinct load_inline candidates of
one problem (fused_bias_gelu), built ahead by CPU workers (pipeline.py) while the GPU verifies.

The 16 candidates are the shipped CUDA candidate with 4 launch widths (a host edit) times 4
spellings of one kernel constant (a kernel edit, same value), so every source differs and no
extension is reused whole; the bindings are shared, as they are between an agent's edits.
The home is fresh: the first builds also pay for the bindings object.

    python bench/cuda_batch_throughput.py --cpu-workers 5 --out bench/results/cuda-batch/h100.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "examples/problems/fused_bias_gelu.py"
BASE = ROOT / "examples/candidates/fused_bias_gelu/cuda.py"
THREADS = (64, 128, 256, 512)
CONSTANTS = ("0.70710678118654752f", "0.7071067811865475f", "0.70710678118654750f", "0.707106781186547524f")


def variants(folder: Path) -> list[str]:
    base = BASE.read_text()
    assert "const int threads = 256;" in base and CONSTANTS[0] in base
    paths = []
    for t in THREADS:
        for c in CONSTANTS:
            path = folder / f"cuda_t{t}_{len(paths)}.py"
            path.write_text(
                base.replace("const int threads = 256;", f"const int threads = {t};").replace(CONSTANTS[0], c)
            )
            paths.append(str(path))
    return paths


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu-workers", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    from kforge_mcp.api import Engine
    from kforge_mcp.core.settings import Settings
    from kforge_mcp.runtime.executor import LocalExecutor
    from kforge_mcp.runtime.pool import WorkerPool

    home = Path(tempfile.mkdtemp(prefix="kforge-cuda-batch-"))
    folder = home / "candidates"
    folder.mkdir()
    paths = variants(folder)
    engine = Engine(
        home=home,
        allow_dirs=[ROOT, home],
        executor=LocalExecutor(WorkerPool(home, settings=Settings.read()), cpu_workers=args.cpu_workers),
    )
    log = []

    def progress(msg: str) -> None:
        log.append((round(time.perf_counter() - started, 2), msg))
        print(f"{log[-1][0]:7.2f} s  {msg}", flush=True)

    try:
        started = time.perf_counter()
        engine.list_targets()
        for lane in ["compile"] + [f"compile.{i}" for i in range(1, args.cpu_workers)]:
            engine.executor.prewarm(lane)
        warm_s = time.perf_counter() - started
        items = [{"problem": str(PROBLEM), "candidate": p, "target": "cuda"} for p in paths]
        started = time.perf_counter()
        reports = engine.verify_batch(items, on_progress=progress)
        wall = time.perf_counter() - started
    finally:
        engine.close()
    verdicts = [r.verdict for r in reports]
    builds = [next((f.evidence for f in r.findings if f.code == "cuda_build"), {}) for r in reports]
    record = {
        "cpus": os.cpu_count(),
        "cpu_workers": args.cpu_workers,
        "candidates": len(items),
        "probe_and_worker_start_s": round(warm_s, 2),
        "batch_wall_s": round(wall, 2),
        "candidates_per_min": round(60 * len(items) / wall, 2),
        "verdicts": verdicts,
        "gpu_worker_builds": builds,
        "progress": log,
    }
    Path(args.out).write_text(json.dumps(record, indent=1))
    print(f"{len(items)} candidates in {wall:.1f} s: {record['candidates_per_min']} per minute; verdicts {verdicts}")


if __name__ == "__main__":
    main()
