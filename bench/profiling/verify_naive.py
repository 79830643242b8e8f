"""Check the naive example candidates on the GPU through the engine (they are too slow for
the CPU interpreter): each must pass before its profile means anything."""

import json
import sys
import tempfile

from kforge_mcp.api import Engine

engine = Engine(home=tempfile.mkdtemp())
results = {}
try:
    for name in ("fused_bias_gelu", "row_softmax", "gemm_bias_relu"):
        for variant in ("triton_naive", "triton"):
            r = engine.verify(
                f"examples/problems/{name}.py", f"examples/candidates/{name}/{variant}.py", target="triton"
            )
            results[f"{name}/{variant}"] = r.model_dump(mode="json")
            print(
                name,
                variant,
                r.verdict,
                r.speedup and round(r.speedup, 3),
                r.speedup_over,
                r.timing and r.timing.candidate and round(r.timing.candidate.median_ms, 4),
                r.errors[:1],
                flush=True,
            )
finally:
    engine.close()
json.dump(results, open(sys.argv[1], "w"), indent=1)
