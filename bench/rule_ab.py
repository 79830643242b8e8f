"""A rule's change on the GPU at the problems' published shapes: each pair is a kernel the rule fires on and the same
kernel with the rule's change made, checked against the reference computed in fp64 with its constant parameters
(GroupNorm's ones and zeros, a scale of ones) redrawn at random, then timed with do_bench (L2 cleared before each call)
in A-B-A-B order, beside eager with torch's default TF32 and torch.compile.

    python bench/rule_ab.py --rule tile_sums --out bench/results/tile-sums/h200.md
    python bench/rule_ab.py --rule tile_sums --held-out --out bench/results/tile-sums/h200-held-out.md
    python bench/rule_ab.py --rule direct_conv --held-out --out bench/results/direct-conv/h200-held-out.md

tile_sums: a persistent convolution kernel that reduces every tile's outputs across its threads and adds them with
atomics, against the same kernel keeping the sums in registers across a run of tiles. direct_conv: Conv3d_GroupNorm_
Mean's best tensor-core kernel against a direct convolution on the FMA units.

--held-out: the rule at shapes it was not drawn from. Conv3d_GroupNorm_Mean's pair on two other instances of the
problem, a 16 x 64 x 64 volume (81 multiply-adds an output pixel into 16 channels, as published but wider) and 64
output channels: `kforge verify` of both kernels (their times), and `kforge profile --depth metrics --advise` of the
first, whose advice says whether the rule fires and what it expects. For direct_conv also problems the rule was not
drawn from (Conv3d_Min_Softmax, Conv3d_Scaling_Tanh_Multiply_Sigmoid): the direct kernel's time by `kforge verify`
against the rule's estimate of it, and its profile (FILE's stem + -PROBLEM-profile.json) with the advice on it.
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
PAIRS = {  # rule: {problem: (a kernel it fires on, the same with its change)}
    "tile_sums": {
        "conv3d_groupnorm_mean_l2": ("step6_two_accumulators.py", "step7_sums_in_registers.py"),
        "convtranspose3d_avgpool_clamp_softmax_multiply_l2": (
            "step9_tile_phase_pairs.py",
            "step10_sums_in_registers.py",
        ),
        "convtranspose3d_relu_groupnorm_l2": ("step6_two_programs_per_sm.py", "ab_step6_sums_in_registers.py"),
    },
    "direct_conv": {"conv3d_groupnorm_mean_l2": ("step7_sums_in_registers.py", "step8_fma_direct.py")},
}
CHANGE = {"tile_sums": "sums in registers", "direct_conv": "direct FMA convolution"}
ROUNDS = 2


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"m_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # so that a model's module can be found from its class
    spec.loader.exec_module(module)
    return module


def pair(problem: str, names: tuple[str, str], change: str, settings: list[dict[str, int]]) -> str:
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

    def error(m) -> float:
        with torch.no_grad():
            return (m(*inputs).double() - want).abs().max().item() / want.abs().max().item()

    rows = [(name, error(m)) for name, m in models.items()]
    times: dict[str, list[float]] = {n: [] for n in models}
    for _ in range(ROUNDS):
        for name, m in models.items():
            times[name].append(triton.testing.do_bench(lambda m=m: m(*inputs)))
    for setting in settings:  # the changed kernel again with its module's constants set otherwise
        module = sys.modules[type(models[names[1]]).__module__]
        saved = {key: getattr(module, key) for key in setting}
        for key, value in setting.items():
            setattr(module, key, value)
        m = models[names[1]]
        label = f"{names[1]} with {', '.join(f'{k} = {v}' for k, v in setting.items())}"
        rows.append((label, error(m)))
        times[label] = [triton.testing.do_bench(lambda m=m: m(*inputs)) for _ in range(ROUNDS)]
        for key, value in saved.items():
            setattr(module, key, value)
    eager = triton.testing.do_bench(lambda: ref(*inputs))
    comp = triton.testing.do_bench(lambda: compiled(*inputs))
    a, b = (statistics.median(times[n]) for n in names)
    lines = [f"## {problem}", "", f"eager {eager:.3f} ms, torch.compile {comp:.3f} ms", ""]
    lines += ["| kernel | ms (each round) | largest error / largest output |", "| --- | --- | --- |"]
    for name, err in rows:
        lines.append(f"| {name} | {' / '.join(f'{t:.4f}' for t in times[name])} | {err:.2e} |")
    lines += ["", f"{change}: 1 - {b:.4f} / {a:.4f} = {1 - b / a:+.1%}", ""]
    return "\n".join(lines)


HELD_OUT = ("conv3d_groupnorm_mean_wide_volume", "conv3d_groupnorm_mean_64_channels")


def kforge(*args: str) -> dict:
    """A `kforge ... --json` call in a process of its own on a fresh home; its JSON report."""
    home = tempfile.mkdtemp(prefix="kforge-rule-ab-")
    command = [sys.executable, "-m", "kforge_mcp.cli", *args, "--target", "triton", "--json", "--home", home]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout)


def verified(t: dict) -> tuple[float | None, str]:
    """A `kforge verify` report's candidate median in ms and its speedup as printed."""
    ms = ((t.get("timing") or {}).get("candidate") or {}).get("median_ms")
    return ms, f"{t['speedup']:.3f}x" if t.get("speedup") else "-"


def held_out(problem: str, rule: str) -> str:
    names = PAIRS[rule]["conv3d_groupnorm_mean_l2"]
    path = str(ROOT / "bench" / "problems" / f"{problem}.py")
    steps = [str(CANDIDATES / "conv3d_groupnorm_mean_l2" / name) for name in names]
    times = [kforge("verify", path, c) for c in steps]
    profiled = kforge("profile", path, steps[0], "--depth", "metrics", "--advise")
    advised = profiled["analysis"]
    conv = next(k for k in profiled["profile"]["kernels"] if k["name"] == "conv3d_stats_kernel")
    said = {r["rule"]: r for r in advised["recommendations"] + advised.get("no_gain", [])}
    fired = said.get(rule)
    top = advised["recommendations"][0]["rule"] if advised["recommendations"] else "none"
    results = [verified(t) for t in times]
    a, b = (m for m, _ in results)
    lines = [f"## {problem}", "", "| step | verdict | ms | speedup |", "| --- | --- | --- | --- |"]
    for name, t, (m, speedup) in zip(names, times, results):
        lines.append(f"| {name} | {t['verdict']} | {m if m is None else round(m, 4)} | {speedup} |")
    said_so = f"fires, expects {fired['expected_gain']:.0%}" if fired else "does not fire"
    said_so += f"; its kernel: {conv.get('registers')} registers a thread, {conv.get('spills')} bytes spilled"
    realized = f"{1 - b / a:+.1%}" if a and b else "no time"
    lines += [
        "",
        f"{rule} on {names[0]}: {said_so} (top advice: {top}); realized 1 - {names[1]} / {names[0]}: {realized}",
    ]
    return "\n".join([*lines, ""])
    return "\n".join(lines)


# problems a rule's change was written for without the rule being drawn from them: the candidate with the change, timed
# by kforge verify against the time the rule's estimate gives it
PRICED = {
    "direct_conv": {
        "conv3d_min_softmax_l2": "direct_fma.py",
        "conv3d_scaling_tanh_multiply_sigmoid_l2": "direct_fma.py",
    }
}


def priced(problem: str, candidate: str, out: Path) -> str:
    """kforge verify and profile of a direct FMA convolution on a problem the rule was not drawn from, against the
    rule's estimate for it: the convolutions' FLOPs at the rule's fraction of the device's FMA peak."""
    from kforge_mcp.advice.rules.direct_conv import DIRECT_CONV
    from kforge_mcp.judge.roofline import lookup_peaks

    path = str(ROOT / "bench" / "problems" / f"{problem}.py")
    kernel = str(CANDIDATES / problem / candidate)
    report = kforge("verify", path, kernel)
    profiled = kforge("profile", path, kernel, "--depth", "metrics", "--advise")
    # the profile itself, so that its advice can be read again as the rules change
    out.with_name(f"{out.stem}-{problem}-profile.json").write_text(
        json.dumps(profiled["profile"], separators=(",", ":"))
    )
    roof = profiled["profile"]["roofline"]
    flops = sum(c["flops"] for c in roof["convs"])
    fma = lookup_peaks(roof["device"])[0].flops["fp32"]
    estimate = flops / (fma * DIRECT_CONV.fma_efficiency) * 1e3
    ms, speedup = verified(report)
    top = profiled["analysis"]["recommendations"]
    lines = [f"## {problem}", "", "| kernel | verdict | ms | speedup | the rule's estimate | of the FMA peak |"]
    lines.append("| --- | --- | --- | --- | --- | --- |")
    reached = f"{flops / (fma * ms * 1e-3):.0%}" if ms else "-"
    shown = ms if ms is None else round(ms, 4)
    lines.append(f"| {candidate} | {report['verdict']} | {shown} | {speedup} | {estimate:.4f} ms | {reached} |")
    said = f"{top[0]['rule']} ({top[0]['priority']}, {top[0]['expected_gain']:.0%})" if top else "none"
    lines += [
        "",
        f"{flops / 1e9:.4g} GFLOP of convolution; FMA peak {fma / 1e12:.4g} TFLOP/s; top advice on it: {said}",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rule", choices=sorted(PAIRS), default="tile_sums")
    ap.add_argument("--held-out", action="store_true", help="the rule at shapes it was not drawn from (above)")
    ap.add_argument(
        "--setting",
        action="append",
        default=[],
        help="NAME=VALUE,... : time the changed kernel again with these module constants (repeatable)",
    )
    args = ap.parse_args()
    rule = args.rule
    versions = f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}"
    head = f"# `{rule}`: {CHANGE[rule]} ({versions})\n\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)  # the held-out profiles are written beside it as they come
    if args.held_out:
        head += (
            f"`python bench/rule_ab.py --rule {rule} --held-out --out FILE`: kforge verify of both kernels (verify's "
            "times and speedups over the faster of eager and torch.compile), kforge profile --depth metrics --advise "
            "of the first.\n\n"
        )
        body = "\n".join(held_out(problem, rule) for problem in HELD_OUT)
        body += "".join("\n" + priced(problem, name, args.out) for problem, name in PRICED.get(rule, {}).items())
    else:
        head += (
            f"`python bench/rule_ab.py --rule {rule} --out FILE`; do_bench medians of two rounds each, A and B in "
            "turn.\n\n"
        )
        settings = [dict((kv.split("=")[0], int(kv.split("=")[1])) for kv in s.split(",")) for s in args.setting]
        body = "\n".join(pair(problem, names, CHANGE[rule], settings) for problem, names in PAIRS[rule].items())
    args.out.write_text(head + body)
    print(head + body)


if __name__ == "__main__":
    main()
