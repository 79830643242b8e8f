"""The reference that judges is the truth: torch's reduced-precision switches (cuDNN's TF32 convolutions on by
default on a GPU, oneDNN's on a CPU) are off while it runs, at every precision (tf32 loosens the tolerance, it
does not round the reference); the baselines are timed at the switches as the process had them; a reference
that torch's defaults move past the tolerance is named."""

from __future__ import annotations

import torch
from conftest import ROOT

from kforge_mcp.judge.precision import MathFlags

PROBLEM = str(ROOT / "tests" / "problems" / "conv2d_reduced_math.py")
EXACT = str(ROOT / "tests" / "candidates" / "conv2d_direct.py")
FAST = {"target": "triton", "trials": 2, "baselines": ["eager"], "timing_budget_s": 0.1}
CONV = "cudnn.conv.fp32_precision"


def conv_switch() -> str:
    return torch.backends.cudnn.conv.fp32_precision


def test_the_reference_is_judged_with_tf32_off():
    before = conv_switch()
    fp32 = MathFlags("cuda:0")
    assert fp32.judging[CONV] == "ieee"
    assert fp32.effective(fp32.judging) == {"matmul": "ieee", "conv": "ieee", "rnn": "ieee"}
    assert fp32.defaults_differ  # torch's default for cuDNN convolutions is TF32
    with fp32.judged():
        assert conv_switch() == "ieee" and not torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
        with fp32.defaults():
            assert conv_switch() == before
        assert conv_switch() == "ieee"
    assert conv_switch() == before
    assert "conv tf32" in fp32.describe(fp32.before) and "conv ieee" in fp32.describe(fp32.judging)


def test_a_cpu_reference_keeps_exact_math():
    flags = MathFlags("cpu")
    assert flags.effective(flags.judging) == {"matmul": "ieee", "conv": "ieee", "rnn": "ieee"}
    assert not flags.defaults_differ  # nothing here to check at the defaults: no extra forward


def test_an_exact_kernel_passes_against_a_reference_that_the_defaults_move(engine):
    report = engine.verify(PROBLEM, EXACT, **FAST)
    assert report.verdict == "pass", (report.mismatches, report.errors)
    assert report.reference_math and "conv ieee" in report.reference_math
    assert report.baseline_math and "conv bf16" in report.baseline_math
    moved = next(f for f in report.findings if f.code == "reference_moved_by_default_math")
    assert moved.evidence["error_fraction_of_tolerance"] > 10, moved
    assert "conv bf16" in moved.message and "fails exact kernels" in moved.message
    # the switch the problem set is as it was once the job is over (the warm worker serves the next job)
    again = engine.verify(PROBLEM, EXACT, **FAST)
    assert again.verdict == "pass" and again.baseline_math == report.baseline_math


def test_outputs_within_atol_of_zero_are_named(engine):
    """The mean of a GroupNorm's output is 0 plus rounding: a kernel of zeros passes, and the verdict says that
    this check cannot tell it from a right one."""
    report = engine.verify(
        str(ROOT / "tests" / "problems" / "groupnorm_mean.py"), str(ROOT / "tests" / "candidates" / "zeros.py"), **FAST
    )
    assert report.verdict == "pass", (report.mismatches, report.errors)
    within = next(f for f in report.findings if f.code == "outputs_within_atol")
    assert within.severity == "warning" and within.evidence["largest_abs_output"] <= 1e-4
    exact = engine.verify(PROBLEM, EXACT, **FAST)
    assert "outputs_within_atol" not in {f.code for f in exact.findings}
