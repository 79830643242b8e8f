"""Does passing a convolution kernel's sizes as tl.constexpr pay? Conv trajectory kernels (bench/candidates/<problem>/):
each problem's latest passing one, and the earlier ones whose ALU pipe (integer and index math) was their busiest,
each timed against itself with the integer sizes its main kernel takes made tl.constexpr
(Triton compiles a version per value, and its index math then divides by constants: a multiply and a shift instead
of a runtime division), on the GPU at the problem's published shapes, in the order A, B, A.

    python bench/constexpr_sizes_ab.py [--out FILE]

Times are triton.testing.do_bench medians (warm L2, same inputs), not verify's; both versions are checked against the
reference with TF32 off at fp32 1e-4 (worst error as a fraction of the tolerance), both built with the same weights
and fed the same inputs as verify builds and draws them. The record also lists each kernel's
ALU and tensor pipe busy share from its trajectory profile, the pipe the index math runs on.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (problem, candidate, its main kernel, the integer sizes made constexpr, the trajectory step file with its profile)
CASES = (
    (
        "convtranspose2d_mish_add_hardtanh_scaling_l2",
        "step6_two_programs.py",
        "convt_mish_kernel",
        ("C_IN", "C_OUT", "HX", "LO_H", "LO_W", "HP", "WP"),
        6,
    ),
    (
        "conv3d_groupnorm_mean_l2",
        "step6_two_accumulators.py",
        "conv3d_stats_kernel",
        ("B", "C_OUT", "D", "OD", "OH", "OW"),
        6,
    ),
    (
        "convtranspose3d_relu_groupnorm_l2",
        "step6_two_programs_per_sm.py",
        "convt_relu_stats_kernel",
        ("B", "C_OUT", "DP", "HP", "WP", "OD", "OH", "OW"),
        6,
    ),
    (
        "conv2d_subtract_tanh_subtract_avgpool_l2",
        "step5_pool_tile.py",
        "conv_tanh_pool_kernel",
        ("B", "C_IN", "C_OUT", "H", "PH", "PW"),
        5,
    ),
    (
        "convtranspose3d_mean_add_softmax_tanh_scaling_l2",
        "step6_two_programs_per_sm.py",
        "convt_mean_softmax_kernel",
        ("B", "C_OUT", "OD", "OH", "OW"),
        6,
    ),
    (
        "convtranspose3d_avgpool_clamp_softmax_multiply_l2",
        "step7_phase_major_stores.py",
        "convt_clamp_exp_kernel",
        ("B", "C_OUT", "HX", "WX", "VX", "ROWS", "LO_D", "LO_H", "LO_W", "OD", "OH", "OW", "DP", "HP", "WP"),
        7,
    ),
    # earlier steps whose ALU pipe was the busiest, at 43-58%
    (
        "conv3d_groupnorm_mean_l2",
        "step1_3xtf32.py",
        "conv3d_kernel",
        ("M", "C_IN", "C_OUT", "D", "H", "W", "OD", "OH", "OW", "K"),
        1,
    ),
    (
        "conv3d_groupnorm_mean_l2",
        "step3_channels_last_taps.py",
        "conv3d_stats_kernel",
        ("C_OUT", "D", "H", "WP", "OD", "OH", "OW"),
        3,
    ),
    (
        "conv3d_groupnorm_mean_l2",
        "step4_tma_persistent.py",
        "conv3d_stats_kernel",
        ("B", "C_OUT", "D", "OD", "OH", "OW"),
        4,
    ),
    (
        "conv3d_groupnorm_mean_l2",
        "step5_bias_in_finisher.py",
        "conv3d_stats_kernel",
        ("B", "C_OUT", "D", "OD", "OH", "OW"),
        5,
    ),
    (
        "convtranspose2d_mish_add_hardtanh_scaling_l2",
        "step2_channels_last.py",
        "convt_mish_kernel",
        ("B", "C_IN", "C_OUT", "HX", "WX", "LO_H", "LO_W", "OH", "OW", "HP", "WP"),
        2,
    ),
    (
        "convtranspose3d_mean_add_softmax_tanh_scaling_l2",
        "step3_fp16_tensor_cores.py",
        "convt_mean_softmax_kernel",
        ("M", "C_IN", "C_OUT", "H", "W", "OD", "OH", "OW"),
        3,
    ),
)


def with_constexpr(source: str, kernel: str, names: tuple[str, ...]) -> str:
    """The source with `names` annotated tl.constexpr in `kernel`'s signature (they may still be passed by position)."""
    start = source.index(f"def {kernel}(")
    end = source.index("):", start)
    signature = source[start:end]
    for name in names:
        signature, n = re.subn(rf"(?<![\w.]){name}(?=\s*[,)\n])(?!\s*:)", f"{name}: tl.constexpr", signature, count=1)
        if n != 1:
            raise ValueError(f"{kernel} takes no plain parameter {name}")
    return source[:start] + signature + source[end:]


def pipes(problem: str, step: int, kernel: str) -> dict:
    record = ROOT / "bench" / "results" / "advice-trajectories" / "conv-h100" / f"step{step}.json"
    for rec in json.loads(record.read_text())["records"]:
        if rec["problem"] == problem:
            k = next(k for k in rec["profile_report"]["kernels"] if k["name"] == kernel)
            return {"alu_pct": k["metrics"].get("inst_pipe_alu_pct"), "tensor_pct": k.get("tensor_pipe_pct")}
    return {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the lines printed here too")
    args = ap.parse_args()
    import torch
    import triton

    from kforge_mcp.core.problem import build_models, load_problem
    from kforge_mcp.core.source import Source, import_source
    from kforge_mcp.judge.precision_paths import error_fraction

    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    lines = [f"# python bench/constexpr_sizes_ab.py on {torch.cuda.get_device_name()}, Triton {triton.__version__}"]
    print(lines[0], flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for problem, candidate, kernel, names, step in CASES:
            path = ROOT / "bench" / "problems" / f"{problem}.py"
            prob = load_problem(Source(text=path.read_text(), name=str(path)), workdir)
            a_text = (ROOT / "bench" / "candidates" / problem / candidate).read_text()
            versions = {"A": a_text, "B": with_constexpr(a_text, kernel, names)}
            modules = {
                k: import_source(Source(text=t, name=f"{candidate} {k}"), workdir, f"{problem}_{k}")
                for k, t in versions.items()
            }
            inputs = prob.make_inputs(0, "cuda")
            times, errors, expected = [], [], None
            for label in ("A", "B", "A"):
                reference, model = build_models(prob, modules[label], "cuda")  # the same weights, as verify draws them
                with torch.no_grad():
                    expected = reference(*inputs) if expected is None else expected
                    errors.append(error_fraction(expected, model(*inputs), 1e-4, 1e-4))
                    times.append(triton.testing.do_bench(lambda m=model: m(*inputs), warmup=50, rep=400))
            a = (times[0] + times[2]) / 2
            line = (
                f"{problem} {candidate} {kernel}: A {times[0]:.3f} / {times[2]:.3f} ms, constexpr sizes "
                f"{times[1]:.3f} ms ({1 - times[1] / a:+.1%} of A's time saved); "
                f"worst error {max(errors):.3g} of the tolerance; "
                f"profile at that step: {pipes(problem, step, kernel)}"
            )
            print(line, flush=True)
            lines.append(line)
            torch.cuda.empty_cache()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
