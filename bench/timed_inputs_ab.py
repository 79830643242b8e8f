"""Do fresh inputs for every timed call change an honest kernel's speedup? The same verify, in one
process, alternating between fresh timed inputs (the default) and one input set fed over and over
(``fresh_timing_inputs: false``, how timing worked before), a few times each.

    python bench/timed_inputs_ab.py --device cuda:0 --repeats 3 --out ab.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = [
    ("bench/problems/fused_bias_gelu_large.py", "examples/candidates/fused_bias_gelu/triton.py"),
    ("bench/problems/row_softmax_large.py", "examples/candidates/row_softmax/triton.py"),
    ("bench/problems/gemm_bias_relu_large.py", "examples/candidates/gemm_bias_relu/triton_3xtf32.py"),
    ("bench/problems/gemm_add_relu_l2.py", "bench/candidates/gemm_add_relu_l2/triton_3xtf32.py"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="timed-inputs-ab.json")
    ap.add_argument("--only", help="the cases whose candidate or problem path contains this")
    args = ap.parse_args()
    from kforge_mcp.core.requests import VerifyRequest
    from kforge_mcp.core.settings import Settings
    from kforge_mcp.core.source import Source
    from kforge_mcp.judge.baselines import BaselineCache
    from kforge_mcp.judge.verify import run_verify

    cache, rows = BaselineCache(), []
    memory_mb = Settings.read().worker_memory_mb  # the worker's limit, as a worker reads it

    def wire(path):
        return Source(text=(ROOT / path).read_text(), name=str(ROOT / path)).to_wire()

    for problem, candidate in CASES:
        if args.only and args.only not in problem + candidate:
            continue
        result = {"problem": problem, "candidate": candidate, "fresh": [], "fixed": []}
        for rep in range(args.repeats):
            for mode in ("fresh", "fixed"):
                req = {
                    "problem": wire(problem),
                    "candidate": wire(candidate),
                    "target": "triton",
                    "device": args.device,
                }
                req |= {"trials": 2, "seed": rep, "fresh_timing_inputs": mode == "fresh", "timing_budget_s": 1.0}
                r = run_verify(
                    VerifyRequest.model_validate(req),
                    lambda *_a, **_k: None,
                    Path(tempfile.mkdtemp()),
                    cache,
                    memory_mb,
                )
                result[mode].append(
                    {
                        "verdict": r.verdict,
                        "speedup": r.speedup,
                        "over": r.speedup_over,
                        "candidate_ms": r.timing.candidate.median_ms if r.timing else None,
                        "eager_ms": r.timing.eager.median_ms if r.timing and r.timing.eager else None,
                        "compiled_ms": r.timing.compiled.median_ms if r.timing and r.timing.compiled else None,
                    }
                )
        for mode in ("fresh", "fixed"):
            sp = [x["speedup"] for x in result[mode] if x["speedup"]]
            result[f"{mode}_median_speedup"] = statistics.median(sp) if sp else None
        print(
            json.dumps({k: result[k] for k in ("candidate", "fresh_median_speedup", "fixed_median_speedup")}),
            flush=True,
        )
        rows.append(result)
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
