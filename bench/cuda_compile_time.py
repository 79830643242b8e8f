"""How long the cuda target's compile takes, before and after the lean path, on this machine.

    python bench/cuda_compile_time.py [--out bench/results/cuda-compile-time] [--skip-slow]

For the fused_bias_gelu CUDA example (a KernelBench-style load_inline source that includes
<torch/extension.h>) it times:
  1. `nvcc -c` of the .cu with torch's headers, host and device: the CUDA half of what
     load_inline's own build runs (before; load_inline adds a g++ main.cpp and a link);
  2. `nvcc -cubin` with torch's headers: device code only (the cuda target's full path);
  3. `nvcc -cubin` with kforge's lean stand-in header (the cuda target's default path);
then CudaTarget.compile end to end for each example, and Engine.compile cold vs a repeat
(a compile-cache hit). Writes cuda-compile-time.json and cuda-compile-time.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

from kforge_mcp.core.problem import resolve_source
from kforge_mcp.core.settings import Settings
from kforge_mcp.targets.cuda import target as cuda
from kforge_mcp.targets.nvidia import tool_version

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["fused_bias_gelu", "row_softmax", "gemm_bias_relu"]


def timed(cmd: list[str], cwd: Path) -> dict:
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    return {
        "seconds": round(time.perf_counter() - started, 2),
        "ok": proc.returncode == 0,
        "command": " ".join(cmd),
        "tail": (proc.stdout + proc.stderr)[-400:] if proc.returncode else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "cuda-compile-time"))
    parser.add_argument("--skip-slow", action="store_true", help="skip the two torch-header nvcc runs (minutes)")
    parser.add_argument("--arch", default="sm_90a")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kforge-cc-"))
    src = resolve_source(str(ROOT / "examples" / "candidates" / "fused_bias_gelu" / "cuda.py"), "candidate")
    _, builds = cuda.capture_builds(src, work)
    pieces = cuda.map_pieces(builds[0].cuda, src.text, "cuda_sources")
    full_cu = work / "full.cu"
    full_cu.write_text(cuda.LOAD_INLINE_CUDA_PREFIX + "\n".join(p.annotated(src.name) for p in pieces) + "\n")
    (work / "kforge_torch_lean.h").write_text(cuda.TORCH_LEAN_H)
    lean_cu = work / "lean.cu"
    lean_cu.write_text(
        '#include "kforge_torch_lean.h"\n' + "\n".join(cuda.lean_piece(p).annotated(src.name) for p in pieces) + "\n"
    )
    nvcc = cuda.find_tool("nvcc")
    inc = [f"-I{d}" for d in cuda.torch_include_dirs()]
    common = [f"-arch={args.arch}", "-std=c++17", "-Xptxas", "-v", "--expt-relaxed-constexpr"]
    runs: dict = {}
    if not args.skip_slow:
        runs["1_nvcc_c_torch_headers_host_and_device"] = timed(
            [nvcc, "-c", *common, *inc, "-Xcompiler", "-fPIC", str(full_cu), "-o", str(work / "full.o")], work
        )
        runs["2_nvcc_cubin_torch_headers_device_only"] = timed(
            [nvcc, "-cubin", *common, *inc, str(full_cu), "-o", str(work / "full.cubin")], work
        )
    runs["3_nvcc_cubin_lean_header"] = timed(
        [nvcc, "-cubin", *common, f"-I{work}", str(lean_cu), "-o", str(work / "lean.cubin")], work
    )

    target = cuda.CudaTarget(Settings.read())
    end_to_end = {}
    for name in EXAMPLES:
        s = resolve_source(str(ROOT / "examples" / "candidates" / name / "cuda.py"), "candidate")
        wd = Path(tempfile.mkdtemp(prefix="kforge-cc-", dir=work))
        started = time.perf_counter()
        report = target.compile(s, args.arch, None, wd)
        end_to_end[name] = {
            "seconds": round(time.perf_counter() - started, 2),
            "ok": report.ok,
            "path": "lean" if "lean path" in " ".join(d.message for d in report.diagnostics) else "full",
            "registers": [k.registers for k in report.kernels],
        }

    from kforge_mcp.api import Engine

    engine = Engine(home=work / "home")
    try:
        cand = str(ROOT / "examples" / "candidates" / "row_softmax" / "cuda.py")
        engine.list_targets()  # start the compile worker first: the cold number is the compile alone
        t0 = time.perf_counter()
        cold = engine.compile("cuda", cand, arch=args.arch)
        cold_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        warm = engine.compile("cuda", cand, arch=args.arch)
        warm_s = time.perf_counter() - t0
    finally:
        engine.close()
    result = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "nvcc": tool_version("nvcc"),
            "loadavg_at_end": os.getloadavg(),
        },
        "nvcc_runs": runs,
        "compile_end_to_end_in_process": end_to_end,
        "engine_compile": {
            "cold_s": round(cold_s, 2),
            "cold_ok": cold.ok,
            "repeat_s": round(warm_s, 4),
            "repeat_cached": warm.cached,
        },
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu.json").write_text(json.dumps(result, indent=1))
    lines = [
        "# cuda target: compile time, before and after the lean path",
        "",
        f"- command: `python bench/cuda_compile_time.py{' --skip-slow' if args.skip_slow else ''}`",
        f"- date {result['date']}; {result['host']['cpus']} CPUs; nvcc {result['host']['nvcc']}; "
        f"load average at the end {tuple(round(x, 2) for x in result['host']['loadavg_at_end'])} "
        "(the machine is shared; other jobs ran alongside)",
        "- source: examples/candidates/fused_bias_gelu/cuda.py (includes <torch/extension.h>)",
        "",
        "| step | seconds | ok |",
        "|---|---|---|",
    ]
    for key, r in runs.items():
        lines.append(f"| {key} | {r['seconds']} | {r['ok']} |")
    lines += [
        "",
        "| example | CudaTarget.compile s (incl. capture + ptxas + demangle) | path | registers |",
        "|---|---|---|---|",
    ]
    for name, r in end_to_end.items():
        lines.append(f"| {name} | {r['seconds']} | {r['path']} | {r['registers']} |")
    ec = result["engine_compile"]
    lines += [
        "",
        f"- Engine.compile row_softmax: cold {ec['cold_s']} s (ok={ec['cold_ok']}), repeat {ec['repeat_s']} s "
        f"(cached={ec['repeat_cached']})",
        "",
        "Commands:",
        "",
    ]
    lines += [f"- `{r['command']}`" for r in runs.values()]
    (out / "cpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
