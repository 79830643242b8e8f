"""Where a cold torch.compile of a problem's reference goes, and how much of it a worker can pay before
the first verify arrives (GPU machine). Each row is a fresh process with empty inductor and Triton caches
(a fresh home's): import torch, then one of

- ``cold``: compile the reference and call it once (what the first verify's baselines job pays);
- ``warmed``: first a warm-up that knows nothing of the problem (inductor's modules, its compile workers,
  Triton's compiler, one tiny pointwise kernel compiled and run), then the reference;
- ``imports``: only inductor's and Triton's modules imported first, then the reference.

    python bench/inductor_warmup.py --out bench/results/inductor-warmup/h100.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CODE = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
from pathlib import Path
from kforge_mcp.core.problem import Source, load_problem, reference_model
times = {"import torch": time.perf_counter() - t0}
mode, name = sys.argv[1], sys.argv[2]
def timed(label, fn):
    t = time.perf_counter(); fn(); torch.cuda.synchronize(); times[label] = time.perf_counter() - t
timed("cuda init", lambda: torch.empty(1, device="cuda"))
if mode == "warmed":
    from kforge_mcp.judge.baselines import warm_inductor
    timed("warm-up", lambda: warm_inductor("cuda"))
elif mode == "imports":
    def imports():
        import torch._dynamo, torch._inductor.compile_fx, triton.compiler  # noqa: F401
    timed("imports", imports)
w = Path(__import__("tempfile").mkdtemp())
p = load_problem(Source(text=Path(f"examples/problems/{name}.py").read_text(), name="p.py"), w)
ref = reference_model(p, "cuda", 0, None, p.init_inputs("cuda", 0))
x = p.make_inputs(0, "cuda")
timed("reference compile + first call", lambda: torch.compile(ref)(*x))  # torch.compile() imports dynamo
print("RESULT", json.dumps({k: round(v, 2) for k, v in times.items()}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", nargs="+", default=["fused_bias_gelu", "gemm_bias_relu"])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows = []
    for _ in range(args.repeats):
        for name in args.problems:
            for mode in ("cold", "warmed", "imports"):
                env = {
                    **os.environ,
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                }
                env["TORCHINDUCTOR_CACHE_DIR"], env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(), tempfile.mkdtemp()
                out = subprocess.run(
                    [sys.executable, "-c", CODE, mode, name], env=env, cwd=ROOT, capture_output=True, text=True
                )
                line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
                row = {
                    "problem": name,
                    "mode": mode,
                    **(json.loads(line[7:]) if line else {"error": out.stderr[-1500:]}),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps({"rows": rows}, indent=1))


if __name__ == "__main__":
    main()
