"""torch.compile of a problem's reference with cold caches, each in a fresh process: inductor's default
compile threads against TORCHINDUCTOR_COMPILE_THREADS=1 (GPU machine).

    python bench/inductor_compile_threads.py   (results: bench/results/inductor-compile-threads/h100.md)
"""

import os
import subprocess
import sys
import tempfile

CODE = r"""
import time, json
t0 = time.perf_counter()
import torch
from pathlib import Path
from kforge_mcp.core.problem import Source, load_problem, reference_model
t1 = time.perf_counter()
w = Path(__import__("tempfile").mkdtemp())
p = load_problem(Source(text=Path("examples/problems/fused_bias_gelu.py").read_text(), name="p.py"), w)
ref = reference_model(p, "cuda", 0, None, p.init_inputs("cuda", 0))
x = p.make_inputs(0, "cuda")
torch.cuda.synchronize()
t2 = time.perf_counter()
c = torch.compile(ref)
c(*x); torch.cuda.synchronize()
t3 = time.perf_counter()
print("RESULT", json.dumps({"import": round(t1 - t0, 2), "setup": round(t2 - t1, 2), "compile_first_call": round(t3 - t2, 2)}))
"""
for threads in (None, "1", None, "1"):
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()
    env["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
    if threads:
        env["TORCHINDUCTOR_COMPILE_THREADS"] = threads
    out = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")), out.stderr[-2000:])
    print("threads", threads or "default", line, flush=True)
