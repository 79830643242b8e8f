"""How long a CUDA load_inline candidate takes to build, stock vs kforge's split build (GPU machine).

Each step runs in a fresh Python process (torch imported before the clock starts) that loads the
candidate through the cuda target, runs it on the example problem's inputs and compares the output
with the reference (so a fast build that computes the wrong thing cannot hide). Steps, per mode, on
an empty extension cache:

- cold: a first build;
- kernel edit: one character changed inside the kernel body;
- host edit: the launch's thread count changed in the host function;
- again: the same source once more (the built extension is reused).

Modes: ``stock`` (torch's load_inline as KernelBench runs it), ``stock+torch_pch`` (load_inline's own
``use_pch``), ``split`` (no precompiled header), ``split+pch`` (torch's headers precompiled first; the
time to precompile them is reported on its own).

    python bench/cuda_build_time.py --out bench/results/cuda-build/h100.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "examples/problems/fused_bias_gelu.py"
CANDIDATE = ROOT / "examples/candidates/fused_bias_gelu/cuda.py"
KERNEL_EDIT = ("0.5f * v * (1.0f", "0.5f * v * (1.00f")
HOST_EDIT = ("const int threads = 256;", "const int threads = 128;")

STEP = r"""
import json, sys, time, torch
from pathlib import Path
from kforge_mcp.core.problem import Source, load_problem, build_models
from kforge_mcp.core.settings import Settings
from kforge_mcp.targets.cuda.target import CudaTarget
src = Source(text=Path(sys.argv[1]).read_text(), name="candidate.py")
work = Path(sys.argv[3]); work.mkdir(parents=True, exist_ok=True)
torch.cuda.init()
target = CudaTarget(Settings.read())
t0 = time.perf_counter()
loaded = target.load(src, "cuda", work)
seconds = time.perf_counter() - t0
module = loaded.module
findings = [f.model_dump() for f in loaded.findings]
problem = load_problem(Source(text=Path(sys.argv[2]).read_text(), name="problem.py"), work)
ref, cand = build_models(problem, module, "cuda")
inputs = problem.make_inputs(0, "cuda")
with torch.no_grad():
    ok = torch.allclose(ref(*inputs), cand(*inputs), atol=1e-4, rtol=1e-4)
print("RESULT " + json.dumps({"seconds": seconds, "correct": bool(ok), "findings": findings}))
"""


def step(text: str, env: dict, scratch: Path, label: str) -> dict:
    cand = scratch / f"{label}.py"
    cand.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-c", STEP, str(cand), str(PROBLEM), str(scratch / f"work-{label}")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        return {"error": (proc.stdout + proc.stderr)[-3000:]}
    out = json.loads(line[len("RESULT ") :])
    build = next((f for f in out["findings"] if f["code"] == "cuda_build"), {})
    out["build"] = build.get("evidence", {})
    del out["findings"]
    return out


def wait_pch(root: Path, limit_s: float = 240) -> float | None:
    """Seconds waited until the split build's precompiled headers (host and bindings) under ``root``
    (an extension folder or a kforge home) are ready; None past ``limit_s``."""
    started = time.perf_counter()
    while time.perf_counter() - started < limit_s:
        if len(list(root.glob("**/kforge-cuda/pch-*/kforge_*.h.gch.ok"))) >= 2:
            return time.perf_counter() - started
        time.sleep(0.5)
    return None


def run_mode(mode: str, base: str) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix=f"cuda-build-{mode}-"))
    env = dict(os.environ)
    env["TORCH_EXTENSIONS_DIR"] = str(scratch / "ext")
    env["KFORGE_CUDA_BUILD"] = "split" if mode.startswith("split") else "stock"
    env["KFORGE_CUDA_PCH"] = "on" if mode == "split+pch" else "off"
    stock_pch = mode == "stock+torch_pch"
    text = base.replace("verbose=False,", "verbose=False, use_pch=True,") if stock_pch else base
    result: dict = {"mode": mode, "steps": {}}
    if mode == "split+pch":
        # the header is precompiled by the first build, in the background; time it to readiness
        result["steps"]["cold (starts the precompiled header)"] = step(text, env, scratch, "cold")
        result["pch_ready_after_s"] = wait_pch(scratch / "ext")
    else:
        result["steps"]["cold"] = step(text, env, scratch, "cold")
    kernel = text.replace(*KERNEL_EDIT)
    result["steps"]["kernel edit"] = step(kernel, env, scratch, "kernel")
    host = kernel.replace(*HOST_EDIT)
    result["steps"]["host edit"] = step(host, env, scratch, "host")
    result["steps"]["again"] = step(host, env, scratch, "again")
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--modes", default="stock,stock+torch_pch,split,split+pch")
    args = ap.parse_args()
    base = CANDIDATE.read_text()
    assert KERNEL_EDIT[0] in base and HOST_EDIT[0] in base
    import torch

    record = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        },
        "candidate": str(CANDIDATE.relative_to(ROOT)),
        "modes": [],
    }
    for mode in args.modes.split(","):
        res = run_mode(mode, base)
        record["modes"].append(res)
        for name, s in res["steps"].items():
            print(
                f"{mode:16s} {name:40s} {s.get('seconds', float('nan')):7.2f} s  correct={s.get('correct')} "
                f"{s.get('build', {}) or s.get('error', '')[-300:]}",
                flush=True,
            )
        if "pch_ready_after_s" in res:
            print(f"{mode:16s} precompiled header ready after {res['pch_ready_after_s']} s", flush=True)
        Path(args.out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
