"""On a GPU (skipped elsewhere): kernels really run on the device, timings use device events,
and a CUDA fault is contained. Recorded runs: bench/results/gpu-triton/, gpu-nvidia/, gpu-tests/."""

from __future__ import annotations

import pytest
from conftest import example, hostile, problem

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]


@pytest.mark.parametrize("name", ["fused_bias_gelu", "row_softmax", "gemm_bias_relu"])
def test_examples_pass_on_the_gpu(engine, name):
    report = engine.verify(problem(name), example(name, "triton"), target="triton")
    assert report.verdict == "pass", (report.errors, report.mismatches)
    assert report.device == "cuda:0" and report.execution == "cuda"
    assert "events" in report.timing.candidate.clock and report.timing.compiled is not None
    assert not any(f.code == "interpreter_timing" for f in report.findings)


def test_wrong_candidate_fails_on_the_gpu(engine):
    report = engine.verify(
        problem("fused_bias_gelu"), example("fused_bias_gelu", "triton_wrong"), target="triton", baselines=["eager"]
    )
    assert report.verdict == "fail" and report.mismatches[0].max_abs_error > 1e-4


def test_cuda_fault_is_contained_and_the_next_verify_passes(engine):
    report = engine.verify(problem("row_softmax"), hostile("illegal_address"), target="triton", baselines=["eager"])
    assert report.verdict == "error", report
    assert any("illegal" in e.lower() or "cuda" in e.lower() for e in report.errors)
    again = engine.verify(
        problem("row_softmax"), example("row_softmax", "triton"), target="triton", baselines=["eager"]
    )
    assert again.verdict == "pass", again.errors


def test_compile_defaults_to_the_device_arch(engine):
    report = engine.compile("triton", example("gemm_bias_relu", "triton"), problem=problem("gemm_bias_relu"))
    major, minor = torch.cuda.get_device_capability(0)
    assert report.ok and report.arch == f"sm_{major}{minor}{'a' if major >= 9 else ''}"
    assert report.kernels[0].registers > 0


def test_unwritten_output_cannot_pass_on_the_gpu(engine):
    """torch.empty_like would hand back the reference's freed block: the candidate runs first
    and free memory is poisoned with NaN, so it fails."""
    from test_guards import verify

    assert verify(engine, "freed_memory").verdict == "fail"


def test_work_on_another_stream_is_flagged(engine):
    from test_guards import codes, verify

    report = verify(engine, "other_stream", timing_budget_s=0.5)
    assert report.verdict in ("suspicious", "fail")
    assert report.verdict == "fail" or "work_outside_timed_stream" in codes(report)


def test_device_state_is_reported(engine):
    report = engine.verify(
        problem("row_softmax"), example("row_softmax", "triton"), target="triton", baselines=["eager"]
    )
    assert report.device_state.get("name") and report.speedup_ci


def test_faster_than_light_is_flagged(engine):
    """Replaying a cached result during timing is faster than the memory system allows."""
    from conftest import ROOT
    from test_guards import codes, verify

    report = verify(engine, "wrong_after_timing", prob=str(ROOT / "tests" / "problems" / "row_softmax_large.py"))
    assert report.verdict == "fail"
    assert {"faster_than_light", "wrong_after_timing"} <= codes(report)


def test_honest_large_kernel_gets_a_fraction_of_sol(engine):
    from conftest import ROOT

    report = engine.verify(
        str(ROOT / "tests" / "problems" / "row_softmax_large.py"),
        example("row_softmax", "triton"),
        target="triton",
        baselines=["eager"],
    )
    assert report.verdict == "pass", report.findings
    assert 0 < report.fraction_of_sol <= 1.0 and report.sol_ms > 0
