"""A persistent convolution kernel that reduces every tile's outputs across its threads and adds them with atomics,
against the same kernel keeping the sums in registers across a run of tiles (the `tile_sums` rule's change), on the
GPU at the problems' published shapes: three pairs, each checked against the reference computed in fp64 with its
constant parameters (GroupNorm's ones and zeros, a scale of ones) redrawn at random, then timed with do_bench (L2
cleared before each call) in A-B-A-B order, beside eager with torch's default TF32 and torch.compile.

    python bench/tile_sums_ab.py --out bench/results/tile-sums/h200.md
    python bench/tile_sums_ab.py --held-out --out bench/results/tile-sums/h200-held-out.md

--held-out: the rule at shapes it was not drawn from. Conv3d_GroupNorm_Mean's sixth and seventh steps (the sums added
every tile, then kept in registers) on two other instances of the problem, a 16 x 64 x 64 volume (81 multiply-adds an
output pixel, as published) and 64 input channels (1728): `kforge verify` of both steps (their times), and `kforge
profile --depth metrics --advise` of the sixth, whose advice says whether the rule fires and what it expects.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
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


HELD_OUT = ("conv3d_groupnorm_mean_wide_volume", "conv3d_groupnorm_mean_64_channels")
HELD_OUT_STEPS = ("step6_two_accumulators.py", "step7_sums_in_registers.py")


def kforge(*args: str) -> dict:
    """A `kforge ... --json` call in a process of its own on a fresh home; its JSON report."""
    home = tempfile.mkdtemp(prefix="kforge-tile-sums-")
    command = [sys.executable, "-m", "kforge_mcp.cli", *args, "--target", "triton", "--json", "--home", home]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout)


def held_out(problem: str) -> str:
    path = str(ROOT / "bench" / "problems" / f"{problem}.py")
    steps = [str(CANDIDATES / "conv3d_groupnorm_mean_l2" / name) for name in HELD_OUT_STEPS]
    times = [kforge("verify", path, c) for c in steps]
    profiled = kforge("profile", path, steps[0], "--depth", "metrics", "--advise")
    advised = profiled["analysis"]
    conv = next(k for k in profiled["profile"]["kernels"] if k["name"] == "conv3d_stats_kernel")
    said = {r["rule"]: r for r in advised["recommendations"] + advised.get("no_gain", [])}
    tile = said.get("tile_sums")
    top = advised["recommendations"][0]["rule"] if advised["recommendations"] else "none"
    ms = [((t.get("timing") or {}).get("candidate") or {}).get("median_ms") for t in times]
    a, b = ms
    lines = [f"## {problem}", "", "| step | verdict | ms | speedup |", "| --- | --- | --- | --- |"]
    for name, t, m in zip(HELD_OUT_STEPS, times, ms):
        speedup = f"{t['speedup']:.3f}x" if t.get("speedup") else "-"
        lines.append(f"| {name} | {t['verdict']} | {m if m is None else round(m, 4)} | {speedup} |")
    fired = f"fires, expects {tile['expected_gain']:.0%}" if tile else "does not fire"
    fired += f"; its kernel: {conv.get('registers')} registers a thread, {conv.get('spills')} bytes spilled"
    realized = f"{1 - b / a:+.1%}" if a and b else "no time"
    lines += ["", f"tile_sums on step 6: {fired} (top advice: {top}); realized 1 - step 7 / step 6: {realized}", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--held-out", action="store_true", help="the rule at shapes it was not drawn from (above)")
    args = ap.parse_args()
    head = f"# Tile sums in registers ({torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__})\n\n"
    if args.held_out:
        head += "`python bench/tile_sums_ab.py --held-out --out FILE`: kforge verify of both steps (verify's times and "
        head += "speedups over the faster of eager and torch.compile), kforge profile --depth metrics --advise of step 6.\n\n"
        body = "\n".join(held_out(problem) for problem in HELD_OUT)
    else:
        head += "`python bench/tile_sums_ab.py --out FILE`; do_bench medians of two rounds each, A and B in turn.\n\n"
        body = "\n".join(pair(problem, names) for problem, names in PAIRS.items())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(head + body)
    print(head + body)


if __name__ == "__main__":
    main()
