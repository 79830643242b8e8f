"""How long building a CUDA candidate ahead takes, and where the time goes: the cuda target's
``prebuild`` (what a CPU worker runs for verify and verify_batch, pipeline.py) in this process
under cProfile, for a cold build, a kernel edit and a host edit; then the same three kinds of
edit (new spellings, so nothing is cached) through a real compile-lane worker, timed from the
engine, to show what the worker path adds.

    python bench/prebuild_profile.py --out bench/results/prebuild-profile/h100.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "examples/candidates/fused_bias_gelu/cuda.py"
KERNEL = "0.5f * v * (1.0f"
HOST = "const int threads = 256;"


def edits(base: str, kernel: str, threads: int) -> list[tuple[str, str]]:
    """(label, source): the base, one kernel edit and one host edit of it."""
    k = base.replace(KERNEL, kernel)
    return [("cold", base), ("kernel edit", k), ("host edit", k.replace(HOST, f"const int threads = {threads};"))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="kforge-prebuild-profile-"))
    os.environ["TORCH_EXTENSIONS_DIR"] = str(home / "cache" / "torch_extensions")
    from kforge_mcp.core.requests import PrebuildRequest
    from kforge_mcp.core.source import Source
    from kforge_mcp.targets import get_target

    base = BASE.read_text()
    target, rows = get_target("cuda"), []
    for label, text in edits(base, "0.5f * v * (1.000f", 128):
        profiler, work = cProfile.Profile(), Path(tempfile.mkdtemp(dir=home))
        started = time.perf_counter()
        profiler.enable()
        builds = target.prebuild(Source(text=text, name="candidate.py"), "cuda:0", work)
        profiler.disable()
        rows.append({"where": "in process", "step": label, "wall_s": round(time.perf_counter() - started, 2)})
        rows[-1]["builds"] = [vars(b) for b in builds]
        print(json.dumps(rows[-1]), flush=True)
        text_out = io.StringIO()
        pstats.Stats(profiler, stream=text_out).sort_stats("cumulative").print_stats(args.top)
        print(text_out.getvalue(), flush=True)

    from kforge_mcp.api import Engine
    from kforge_mcp.core.requests import Done
    from kforge_mcp.core.settings import Settings
    from kforge_mcp.runtime.executor import LocalExecutor
    from kforge_mcp.runtime.pool import WorkerPool

    engine = Engine(
        home=home,
        allow_dirs=[ROOT, home],
        executor=LocalExecutor(WorkerPool(home, settings=Settings.read()), cpu_workers=1),
    )
    try:
        started = time.perf_counter()
        engine.executor.prewarm("compile")
        rows.append({"where": "worker", "step": "start the compile worker", "wall_s": time.perf_counter() - started})
        for label, text in edits(base, "0.5f * v * (1.0000f", 512):
            request = PrebuildRequest(target="cuda", candidate=Source(text=text, name="candidate.py"), device="cuda:0")
            started = time.perf_counter()
            reply = engine.executor.run("compile", request, timeout_s=900)
            rows.append({"where": "worker", "step": label, "wall_s": round(time.perf_counter() - started, 2)})
            rows[-1]["builds"] = reply.value.get("builds") if isinstance(reply, Done) else reply.model_dump()
            print(json.dumps(rows[-1]), flush=True)
    finally:
        engine.close()
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
