"""Capture real profiles of the example kernels (naive and tuned) on a GPU, for the parser
and rule tests in tests/data/profiles/ and for the before/after runs of the analysis agent.

    python bench/profiling/capture.py --out DIR [--only PROBLEM]

Per problem and variant (reference, triton_naive, triton): a torch.profiler chrome trace,
Nsight Compute raw and details CSVs (full set; ncu locks clocks by default), the .ncu-rep,
and a proton profile. Each profiler runs in its own process (one CUPTI user per process).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_forward import build  # noqa: E402

PROBLEMS = ["fused_bias_gelu", "row_softmax", "gemm_bias_relu"]
VARIANTS = ["reference", "triton_naive", "triton"]


def torch_trace(problem: str, variant: str, out: Path) -> dict:
    from torch.profiler import ProfilerActivity, profile

    model, inputs = build(problem, variant)
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            for _ in range(5):
                model(*inputs)
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(out / f"{problem}-{variant}.torch-trace.json"))
    (out / f"{problem}-{variant}.torch-table.txt").write_text(
        prof.key_averages().table(sort_by="device_time_total", row_limit=20)
    )
    return {"kernels": sorted({e.key for e in prof.key_averages() if e.device_time_total > 0})}


def run(cmd: list[str], log: Path, stdout: Path | None = None) -> int:
    with open(stdout or log, "w") as f:
        proc = subprocess.run(
            cmd, stdout=f, stderr=subprocess.STDOUT if stdout is None else subprocess.PIPE, text=True, timeout=540
        )
    if stdout is not None and proc.stderr:
        log.write_text(proc.stderr)
    return proc.returncode


def ncu(problem: str, variant: str, out: Path) -> dict:
    """Profile once into a .ncu-rep, then export its raw and details pages as CSV from it."""
    fwd = [sys.executable, str(HERE / "run_forward.py"), problem, variant, "--iters", "1"]
    stem = out / f"{problem}-{variant}"
    rep = stem.with_suffix(".ncu-rep")
    codes = {
        "rep": run(["ncu", "--set", "full", "-c", "12", "-f", "-o", str(stem), *fwd], stem.with_suffix(".ncu.log"))
    }
    for page in ("raw", "details"):
        codes[page] = run(
            ["ncu", "--import", str(rep), "--csv", "--page", page],
            stem.with_suffix(f".ncu-{page}.log"),
            stem.with_suffix(f".ncu-{page}.csv"),
        )
    return codes


def proton(problem: str, variant: str, out: Path) -> int:
    name = str(out / f"{problem}-{variant}.proton")
    cmd = [sys.executable, str(HERE / "run_forward.py"), problem, variant, "--iters", "5", "--proton", name]
    return run(cmd, out / f"{problem}-{variant}.proton.log")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--only")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "ncu": shutil.which("ncu")}
    for problem in [args.only] if args.only else PROBLEMS:
        for variant in VARIANTS:
            key = f"{problem}-{variant}"
            try:
                summary[key] = {"torch": torch_trace(problem, variant, out)}
            except Exception as e:  # noqa: BLE001  (record and go on: one broken variant must not lose the rest)
                summary[key] = {"torch_error": repr(e)}
            summary[key]["ncu"] = ncu(problem, variant, out)
            if variant != "reference":
                summary[key]["proton"] = proton(problem, variant, out)
            print(key, json.dumps(summary[key])[:300], flush=True)
    (out / "capture-summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
