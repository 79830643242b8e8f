"""Candidates verified per minute: the local executor against the Ray executor, for one batch of
distinct candidates of one problem (fused_bias_gelu, Triton).

The candidates are the shipped Triton candidate with different BLOCK sizes and num_warps, each
tagged with its index, so all sources differ and no compile or load cache makes a later one free.
Each executor first verifies one extra variant (worker start-up, imports: reported apart), then
the batch goes through Engine.verify_batch, which runs as many at once as the executor has slots.

    python bench/executor_throughput.py                      # cuda:0 if there is a GPU, else cpu
    python bench/executor_throughput.py --count 32 --executors local,local-cpu,ray --out bench/results/executor-throughput/cpu

Needs torch, triton, numpy, pydantic, mcp, jinja2, rich, filelock and ray; run from the repo root.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Ray's workers (started by the local Ray below) import kforge_mcp from here, installed or not
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)

PROBLEM = ROOT / "examples" / "problems" / "fused_bias_gelu.py"
BASE = ROOT / "examples" / "candidates" / "fused_bias_gelu" / "triton.py"
BLOCKS = (1024, 2048, 4096, 8192)
WARPS = (2, 4, 8, 16)


def variants(folder: Path, count: int) -> list[str]:
    base = BASE.read_text()
    assert "BLOCK = 4096" in base and "BLOCK=BLOCK)" in base
    paths = []
    for i in range(count):
        block, warps = BLOCKS[i % len(BLOCKS)], WARPS[(i // len(BLOCKS)) % len(WARPS)]
        src = base.replace("BLOCK = 4096", f"BLOCK = {block}").replace(
            "BLOCK=BLOCK)", f"BLOCK=BLOCK, num_warps={warps})"
        )
        path = folder / f"variant_{i:02d}.py"
        path.write_text(f"# benchmark variant {i}: BLOCK={block}, num_warps={warps}\n" + src)
        paths.append(str(path))
    return paths


def make_engine(name: str, home: Path, folder: Path, cpu_workers: int | None):
    from kforge_mcp.api import Engine
    from kforge_mcp.core.settings import Settings
    from kforge_mcp.runtime.executor import LocalExecutor
    from kforge_mcp.runtime.pool import WorkerPool

    if name.startswith("local"):
        executor = LocalExecutor(
            WorkerPool(home, settings=Settings.read()), cpu_workers=cpu_workers if name == "local-cpu" else 1
        )
    else:
        from kforge_mcp.runtime.ray_executor import RayExecutor

        executor = RayExecutor(
            address=os.environ.get("KFORGE_RAY_ADDRESS") or None, home=str(home), cpu_workers=cpu_workers
        )
    return Engine(home=home, executor=executor, allow_dirs=[ROOT, folder])


def run_one(
    name: str, candidates: list[str], warmup: str, device: str | None, cpu_workers: int | None, common: dict
) -> dict:
    folder = Path(candidates[0]).parent
    home = Path(tempfile.mkdtemp(prefix=f"kforge-bench-{name}-"))  # cold caches for every executor
    t0 = time.perf_counter()
    engine = make_engine(name, home, folder, cpu_workers)
    try:
        targets = engine.list_targets()
        dev = device or next(d for d in next(t for t in targets.targets if t.name == "triton").devices)
        lane_slots = engine.executor.slots(dev)
        first = engine.verify(str(PROBLEM), warmup, device=dev, **common)
        startup_s = time.perf_counter() - t0
        finished = []
        t1 = time.perf_counter()
        reports = engine.verify_batch(
            [{"problem": str(PROBLEM), "candidate": c} for c in candidates],
            device=dev,
            on_result=lambda i, r: finished.append(time.perf_counter() - t1),
            **common,
        )
        seconds = time.perf_counter() - t1
    finally:
        engine.close()
    verdicts: dict[str, int] = {}
    for r in reports:
        verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
    row = {
        "executor": name,
        "device": dev,
        "slots": lane_slots,
        "startup_s": round(startup_s, 1),
        "warmup_verdict": first.verdict,
        "batch_s": round(seconds, 1),
        "candidates": len(candidates),
        "candidates_per_min": round(60 * len(candidates) / seconds, 2),
        "verdicts": verdicts,
        "first_result_s": round(finished[0], 1) if finished else None,
        "nodes": len(targets.nodes) or 1,
        "errors": sorted({e[:160] for r in reports for e in r.errors if e})[:5],
    }
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=32, help="candidates in the batch (default 32)")
    ap.add_argument(
        "--executors",
        default="local,local-cpu,ray",
        help="comma-separated: local (one worker per "
        "lane), local-cpu (--cpu-workers for CPU lanes), ray (a local Ray, or $KFORGE_RAY_ADDRESS)",
    )
    ap.add_argument("--device", help="default: the triton target's first device (cuda:0 on a GPU machine)")
    ap.add_argument(
        "--cpu-workers", type=int, default=None, help="CPU-lane workers for local-cpu and ray (default: half the CPUs)"
    )
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--out", help="write OUT.json and OUT.md (e.g. bench/results/executor-throughput/cpu)")
    args = ap.parse_args()
    cpu_workers = args.cpu_workers or max(1, (os.cpu_count() or 2) // 2)
    common = {
        "target": "triton",
        "trials": args.trials,
        "baselines": ["eager"],
        "timing_budget_s": 0.3,
        "timeout_s": 600,
    }
    with tempfile.TemporaryDirectory(prefix="kforge-bench-cands-") as tmp:
        paths = variants(Path(tmp), args.count + 1)
        rows = [
            run_one(name.strip(), paths[1:], paths[0], args.device, cpu_workers, common)
            for name in args.executors.split(",")
            if name.strip()
        ]
    import torch

    meta = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cpu_workers": cpu_workers,
        "trials": args.trials,
        "count": args.count,
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
        lines = [
            f"# Executor throughput: {args.count} distinct Triton candidates of fused_bias_gelu",
            "",
            f"{meta['when']}, {meta['cpus']} CPUs, GPU {meta['gpu'] or 'none'}, torch {meta['torch']}, "
            f"{args.trials} trials and an eager baseline per candidate, CPU-lane workers {cpu_workers}.",
            "Written by `bench/executor_throughput.py`. start-up: engine, probe and one warm-up verify.",
            "",
            "| executor | device | slots | start-up s | batch s | candidates / min | first result s | verdicts |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for r in rows:
            lines.append(
                f"| {r['executor']} | {r['device']} | {r['slots']} | {r['startup_s']} | {r['batch_s']} | "
                f"{r['candidates_per_min']} | {r['first_result_s']} | "
                f"{', '.join(f'{k} {v}' for k, v in r['verdicts'].items())} |"
            )
        out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
