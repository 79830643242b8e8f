"""The convolution trajectories' kernels, checked on a CPU: each problem of a convolution set (bench/advice_trajectories.py)
with its size constants scaled down (batch 2, spatial sizes about a quarter, channels and kernel sizes as published),
its step's candidate run through Triton's interpreter against the reference with TF32 off, at fp32 atol = rtol = 1e-4,
on two seeds (weights and inputs drawn as verify draws them: kforge's build_models and make_inputs). tl.dot runs as
verify runs it under the interpreter: its operands rounded as an NVIDIA GPU rounds them (tf32x3's split), bf16 ones
multiplied as values (the interpreter alone multiplies their bit patterns).

Two things make the check stricter than verify's rule alone, so that it can fail where the published problems hide a
wrong kernel: parameters that start constant (GroupNorm's ones and zeros, a scale of ones) are redrawn at random, the
same in both models (with ones and zeros, 23_Conv3d_GroupNorm_Mean returns the mean of GroupNorm's bias whatever the
convolution computes); and the largest error must also stay within 1e-4 of the largest output (38's softmax outputs,
about 1e-5, sit below atol itself, where zeros would pass).

    python bench/conv_step_check.py [--set conv|small-conv] [--step 0] [--problems NAME ...]

Prints, per problem and seed, the verdict, the worst error as a fraction of the tolerance (max |a - b| /
(atol + rtol |b|)) and of the largest output, and the seconds the candidate took in the interpreter; exits 1 when any
check fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before Triton is first imported: kernels run on CPU tensors

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advice_trajectories import SETS, step_files  # noqa: E402  (after the interpreter switch)

ATOL = RTOL = 1e-4
SEEDS = (1, 2)
# The constants each problem's get_inputs() / get_init_inputs() read, at sizes the interpreter can afford.
SMALL = {
    "conv3d_groupnorm_mean_l2": {"batch_size": 2, "D": 6, "H": 8, "W": 8},
    "conv2d_subtract_tanh_subtract_avgpool_l2": {"batch_size": 2, "height": 32, "width": 32},
    "convtranspose3d_mean_add_softmax_tanh_scaling_l2": {"batch_size": 2, "depth": 8, "height": 32, "width": 32},
    "convtranspose2d_mish_add_hardtanh_scaling_l2": {"batch_size": 2, "height": 32, "width": 32},
    "convtranspose3d_relu_groupnorm_l2": {"batch_size": 2, "D": 8, "H": 8, "W": 8},
    "convtranspose3d_avgpool_clamp_softmax_multiply_l2": {"batch_size": 2, "depth": 8, "height": 16, "width": 16},
    "conv2d_add_scale_sigmoid_groupnorm_l2": {"batch_size": 2, "height": 32, "width": 32},
    "conv3d_softmax_maxpool_maxpool_l2": {"batch_size": 2, "depth": 8, "height": 12, "width": 12},
    "conv3d_multiply_instancenorm_clamp_multiply_max_l2": {"batch_size": 2, "depth": 6, "height": 8, "width": 8},
    "convtranspose3d_scaling_avgpool_biasadd_scaling_l2": {"batch_size": 2, "depth": 4, "height": 8, "width": 8},
}


def redraw_constant_parameters(reference, model, seed: int) -> list[str]:
    """Parameters of the reference whose values are all equal, redrawn from N(0, 1) in both models (matched by name,
    as kforge's seeded construction matches them in order); their names."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    theirs = dict(model.named_parameters())
    redrawn = []
    with torch.no_grad():
        for name, p in reference.named_parameters():
            if p.numel() > 1 and bool((p == p.reshape(-1)[0]).all()):
                if name not in theirs:
                    raise SystemExit(f"ModelNew has no parameter {name} (the reference's): weights cannot be matched")
                value = torch.randn(p.shape, generator=generator)
                p.copy_(value)
                theirs[name].copy_(value)
                redrawn.append(name)
    return redrawn


def check(problem_name: str, candidate: Path, workdir: Path) -> bool:
    import torch

    from kforge_mcp.core.problem import build_models, load_problem
    from kforge_mcp.core.source import Source, import_source
    from kforge_mcp.judge.correctness import compare_outputs
    from kforge_mcp.judge.precision_paths import error_fraction
    from kforge_mcp.targets.triton.target import interpreted

    path = ROOT / "bench" / "problems" / f"{problem_name}.py"
    problem = load_problem(Source(text=path.read_text(), name=str(path)), workdir)
    for name, value in SMALL[problem_name].items():
        assert hasattr(problem.module, name), f"{problem_name} has no constant {name}"
        setattr(problem.module, name, value)
    module = import_source(Source(text=candidate.read_text(), name=str(candidate)), workdir, "candidate")
    ok = True
    for seed in SEEDS:
        reference, model = build_models(problem, module, "cpu", seed=seed)
        redrawn = redraw_constant_parameters(reference, model, seed)
        inputs = problem.make_inputs(seed * 1000, "cpu")
        with torch.no_grad():
            expected = reference(*[x.clone() for x in inputs])
            started = time.perf_counter()
            with interpreted():
                got = model(*[x.clone() for x in inputs])
            seconds = time.perf_counter() - started
        mismatch = compare_outputs(expected, got, seed, ATOL, RTOL)
        frac = error_fraction(expected, got, ATOL, RTOL)
        scaled = float((got - expected).abs().max() / expected.abs().max()) if mismatch is None else None
        passed = mismatch is None and scaled is not None and scaled <= RTOL
        ok &= passed
        shapes = " ".join("x".join(map(str, x.shape)) for x in inputs)
        verdict = "pass" if passed else f"FAIL ({mismatch.reason if mismatch else 'off the largest output'})"
        error = f"max error {frac:.3g} of the tolerance" + (
            f", {scaled:.2g} of the largest output" if scaled is not None else ""
        )
        print(
            f"{problem_name} {candidate.name} seed {seed}: input {shapes} -> {'x'.join(map(str, got.shape))}"
            f"{' (redrawn: ' + ', '.join(redrawn) + ')' if redrawn else ''}: {verdict}, {error}; "
            f"{seconds:.1f} s in the interpreter",
            flush=True,
        )
    return ok


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--step", type=int, default=0)
    ap.add_argument("--set", choices=[n for n in SETS if n != "gemm"], default="conv")
    ap.add_argument("--problems", nargs="*", help="default: every problem of the set")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # the exact fp32 reference verify judges against
    torch.backends.cudnn.allow_tf32 = False
    ok = True
    with tempfile.TemporaryDirectory(prefix="conv-step-check-") as tmp:
        for name in args.problems or SETS[args.set]:
            files = step_files(name, args.step)
            if not files:
                print(f"{name}: no step{args.step}_*.py")
                ok = False
            for candidate in files:
                ok &= check(name, candidate, Path(tmp))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
