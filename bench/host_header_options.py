"""Which header each host-side unit of the split CUDA build should compile with, and precompile.

Times the two C++ units of a real candidate (examples/candidates/<name>/cuda.py, split as the build
splits it) under each header option, with and without a precompiled header, one compile at a time:

- host unit (the host functions): torch/extension.h, or torch/types.h (the lean prelude);
- bindings (main.cpp): torch/extension.h, torch/python.h, or the slim prelude (Tensor, pybind11 and
  torch's casters: what the build gives bindings of declared functions).

On a GPU machine the flags are torch's own (the build plan load_inline writes); elsewhere torch's
include paths with -O3 -fPIC -std=c++17, which is what the plan holds besides the ABI and arch flags.

    python bench/host_header_options.py --out bench/results/host-header-options/cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path

from kforge_mcp.targets.cuda import build_plan
from kforge_mcp.targets.cuda import preludes as pl
from kforge_mcp.targets.cuda.split import split

ROOT = Path(__file__).resolve().parents[1]
MAIN_CPP = """#include <torch/extension.h>
torch::Tensor {fn}(torch::Tensor x, torch::Tensor bias, double scale);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{
m.def("{fn}", torch::wrap_pybind_function({fn}), "{fn}");
}}"""  # as load_inline writes it


def flags(candidate_cuda: str) -> tuple[list[str], list[str], str]:
    """(cxx, cflags, where they came from)."""
    import torch

    if torch.cuda.is_available():
        import torch.utils.cpp_extension as ce

        plan = build_plan.plan_build(
            ce.load_inline, "kforge_header_bench", "", candidate_cuda, [], {}, Path(tempfile.mkdtemp())
        )
        return plan.cxx, plan.host_cflags + plan.post_cflags, "torch's build plan"
    from torch.utils.cpp_extension import include_paths

    dirs = [*include_paths(), sysconfig.get_paths()["include"], "/usr/local/cuda/include"]
    cflags = ["-std=c++17", "-O3", "-fPIC", "-DTORCH_API_INCLUDE_EXTENSION_H", *[f"-isystem{d}" for d in dirs]]
    return ["c++"], cflags, "torch's include paths (no GPU: no build plan)"


def timed(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    run = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{run.stdout}{run.stderr}"[-3000:])
    return round(time.perf_counter() - t0, 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidate", default="fused_bias_gelu")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", help="preludes to time, comma-separated (extension, types, python, slim); default all")
    args = ap.parse_args()
    text = (ROOT / f"examples/candidates/{args.candidate}/cuda.py").read_text()
    cuda = re.search(r'cuda_source = r?"""(.*?)"""', text, re.S).group(1)
    fn = re.search(r'functions=\["(\w+)"\]', text).group(1)
    cxx, cflags, origin = flags(cuda)
    work = Path(tempfile.mkdtemp(prefix="kforge-headers-"))
    host = split(cuda).host
    (work / "host_full.cpp").write_text(host)
    (work / "host_lean.cpp").write_text(pl._EXTENSION_INCLUDE.sub(pl.LEAN_HOST_HEADER, host))
    (work / "main_full.cpp").write_text(MAIN_CPP.format(fn=fn))
    (work / "main_lean.cpp").write_text(
        MAIN_CPP.format(fn=fn).replace(pl.FULL_BINDINGS_HEADER, pl.LEAN_BINDINGS_HEADER)
    )
    (work / "main_slim.cpp").write_text(pl.bindings_unit(MAIN_CPP.format(fn=fn))[1])
    preludes = {"extension": pl.PRELUDE, "types": pl.LEAN_PRELUDE, "python": pl.BINDINGS_PRELUDE}
    preludes["slim"] = pl.SLIM_BINDINGS_PRELUDE
    for name, prelude in preludes.items():
        (work / f"{name}.h").write_text(prelude)
    options = [  # (unit, header, source, prelude)
        ("host", "torch/extension.h", "host_full.cpp", "extension"),
        ("host", "torch/types.h", "host_lean.cpp", "types"),
        ("bindings", "torch/extension.h", "main_full.cpp", "extension"),
        ("bindings", "torch/python.h", "main_lean.cpp", "python"),
        ("bindings", "slim: ATen/core/Tensor.h + torch/csrc/utils/pybind.h", "main_slim.cpp", "slim"),
    ]
    if args.only:
        options = [o for o in options if o[3] in args.only.split(",")]
    rows, pch_s = [], {}
    for unit, header, source, prelude in options:
        compile_cmd = [*cxx, *cflags, "-DTORCH_EXTENSION_NAME=kforge_header_bench", "-Winvalid-pch"]
        compile_cmd += ["-include", f"{prelude}.h", "-x", "c++", "-c", source, "-o", f"{source}.o"]
        gch, spare = work / f"{prelude}.h.gch", work / f"{prelude}.gch.spare"
        without = timed(compile_cmd, work)  # no .gch beside the header: its text is parsed
        if spare.exists():
            spare.rename(gch)
        else:
            pch_s[prelude] = timed([*cxx, *cflags, "-x", "c++-header", f"{prelude}.h", "-o", gch.name], work)
        with_pch = timed(compile_cmd, work)
        row = {"unit": unit, "header": header, "compile_s": without, "with_pch_s": with_pch}
        row.update(pch_build_s=pch_s[prelude], pch_mb=round(gch.stat().st_size / 2**20))
        gch.rename(spare)
        rows.append(row)
        print(json.dumps(row), flush=True)
    record = {"cpus": os.cpu_count(), "flags_from": origin, "candidate": args.candidate, "rows": rows}
    Path(args.out).write_text(json.dumps(record, indent=1))
    lines = [
        f"# Host-side units of the split CUDA build: header options ({os.cpu_count()} CPUs)",
        "",
        f"`python bench/host_header_options.py`; candidate {args.candidate}; flags from {origin}; one compile at a time.",
        "",
        "| unit | header | compile | with it precompiled | precompiling it | .gch size |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['unit']} | {r['header']} | {r['compile_s']} s | {r['with_pch_s']} s | {r['pch_build_s']} s | {r['pch_mb']} MB |"
        for r in rows
    ]
    Path(args.out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
