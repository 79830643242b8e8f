"""Run one example's ModelNew (or Model) forward on the GPU: the program a profiler wraps.

    python bench/profiling/run_forward.py PROBLEM CANDIDATE [--iters N] [--proton NAME]

CANDIDATE is a file under examples/candidates/PROBLEM/ without .py, or 'reference'. Trusted
code only (the project's own examples): it runs in this process.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(problem: str, candidate: str):
    prob = load(ROOT / "examples" / "problems" / f"{problem}.py", "problem")
    torch.manual_seed(0)
    init = prob.get_init_inputs()
    torch.manual_seed(0)
    if candidate == "reference":
        model = prob.Model(*init)
    else:
        model = load(ROOT / "examples" / "candidates" / problem / f"{candidate}.py", "candidate").ModelNew(*init)
    torch.manual_seed(7)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in prob.get_inputs()]
    return model.cuda(), inputs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("problem")
    parser.add_argument("candidate")
    parser.add_argument("--iters", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--proton", help="write a proton profile with this name")
    args = parser.parse_args()
    model, inputs = build(args.problem, args.candidate)
    with torch.no_grad():
        for _ in range(args.warmup):
            model(*inputs)  # JIT compiles happen here, not in the profiled iterations
        torch.cuda.synchronize()
        if args.proton:
            import triton.profiler as proton

            proton.start(args.proton, hook="triton")
        for _ in range(args.iters):
            model(*inputs)
        torch.cuda.synchronize()
        if args.proton:
            proton.finalize()


if __name__ == "__main__":
    main()
