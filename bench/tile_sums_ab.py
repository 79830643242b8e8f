"""A persistent convolution kernel that reduces every tile's outputs across its threads and adds them with atomics,
against the same kernel keeping the sums in registers across a run of tiles (the `tile_sums` rule's change), on the
GPU at the problems' published shapes: three pairs, each checked against the reference computed in fp64 with its
constant parameters (GroupNorm's ones and zeros, a scale of ones) redrawn at random, then timed with do_bench (L2
cleared before each call) in A-B-A-B order, beside eager with torch's default TF32 and torch.compile.

    python bench/tile_sums_ab.py --out bench/results/tile-sums/h200.md
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = ROOT / "bench" / "candidates"
PAIRS = {  # problem: (the kernel that adds its sums every tile, the same keeping them in registers)
    "conv3d_groupnorm_mean_l2": ("step6_two_accumulators.py", "step7_sums_in_registers.py"),
    "convtranspose3d_avgpool_clamp_softmax_multiply_l2": ("step9_tile_phase_pairs.py", "step10_sums_in_registers.py"),
    "convtranspose3d_relu_groupnorm_l2": ("step6_two_programs_per_sm.py", "ab_step6_sums_in_registers.py"),
}
ROUNDS = 2


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"m_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pair(problem: str, names: tuple[str, str]) -> str:
    p = load(ROOT / "bench" / "problems" / f"{problem}.py")
    torch.manual_seed(0)
    ref = p.Model(*p.get_init_inputs()).cuda()
    with torch.no_grad():
        for n, w in ref.named_parameters():
            if w.dim() <= 1 or n.endswith("scale"):  # constant at init: redrawn so a wrong kernel cannot pass
                w.copy_(torch.randn_like(w) * 0.5 + (1.0 if "weight" in n or "scale" in n else 0.0))
    inputs = [x.cuda() for x in p.get_inputs()]
    exact = p.Model(*p.get_init_inputs()).cuda().double()
    exact.load_state_dict(ref.state_dict())
    with torch.no_grad():
        want = exact(*[x.double() for x in inputs])
    torch.backends.cudnn.allow_tf32 = True  # eager and torch.compile as users run them
    compiled = torch.compile(ref)
    compiled(*inputs)
    models = {}
    for name in names:
        m = load(CANDIDATES / problem / name).ModelNew(*p.get_init_inputs()).cuda()
        m.load_state_dict(ref.state_dict(), strict=False)
        models[name] = m
    rows = []
    for name, m in models.items():
        with torch.no_grad():
            err = (m(*inputs).double() - want).abs().max().item() / want.abs().max().item()
        rows.append((name, err))
    times: dict[str, list[float]] = {n: [] for n in models}
    for _ in range(ROUNDS):
        for name, m in models.items():
            times[name].append(triton.testing.do_bench(lambda m=m: m(*inputs)))
    eager = triton.testing.do_bench(lambda: ref(*inputs))
    comp = triton.testing.do_bench(lambda: compiled(*inputs))
    a, b = (statistics.median(times[n]) for n in names)
    lines = [f"## {problem}", "", f"eager {eager:.3f} ms, torch.compile {comp:.3f} ms", ""]
    lines += ["| kernel | ms (each round) | largest error / largest output |", "| --- | --- | --- |"]
    for name, err in rows:
        lines.append(f"| {name} | {' / '.join(f'{t:.4f}' for t in times[name])} | {err:.2e} |")
    lines += ["", f"sums in registers: 1 - {b:.4f} / {a:.4f} = {1 - b / a:+.1%}", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    head = f"# Tile sums in registers ({torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__})\n\n"
    head += "`python bench/tile_sums_ab.py --out FILE`; do_bench medians of two rounds each, A and B in turn.\n\n"
    body = "\n".join(pair(problem, names) for problem, names in PAIRS.items())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(head + body)
    print(head + body)


if __name__ == "__main__":
    main()
