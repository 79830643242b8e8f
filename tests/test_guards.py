"""One candidate per known cheat (tests/cheats/): none may pass. Each is caught by its own
guard, named by a stable finding code. And honest candidates are never flagged."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import example, problem

CHEATS = Path(__file__).resolve().parent / "cheats"
PROBLEM = str(CHEATS / "problem.py")


def verify(engine, candidate: str, prob: str = PROBLEM, **kwargs):
    args = {"target": "triton", "trials": 3, "baselines": ["eager"], "timing_budget_s": 0.2, **kwargs}
    return engine.verify(prob, str(CHEATS / f"{candidate}.py"), **args)


def codes(report) -> set[str]:
    return {f.code for f in report.findings}


@pytest.mark.slow
def test_honest_small_softmax_passes_clean(engine):
    report = verify(engine, "honest")
    assert report.verdict == "pass", (report.mismatches, report.findings, report.errors)
    assert all(f.severity == "info" for f in report.findings), report.findings
    assert report.speedup_ci and report.speedup_ci[0] <= report.speedup <= report.speedup_ci[1]
    assert report.timing.candidate.cv >= 0


@pytest.mark.parametrize(
    ("cheat", "verdict", "code"),
    [
        ("cached_result", "fail", None),  # fresh inputs each trial: the replay is wrong on trial 2
        ("mutate_input", "suspicious", "input_mutated"),
        ("freed_memory", "fail", None),
        ("other_thread", {"fail", "suspicious"}, "spawned_threads"),
        ("patch_timer", "suspicious", "timer_patched"),
        ("torch_op", "suspicious", "torch_op_instead_of_kernel"),
        ("no_kernel", "suspicious", "no_kernel_launched"),
        ("lazy_subclass", "fail", "output_not_plain_tensor"),
        ("gc_lookup", {"fail", "suspicious", "error"}, "introspection"),
        ("nondeterministic", "fail", "nondeterministic"),
        ("wrong_after_timing", "fail", "wrong_after_timing"),
        ("fixed_shape", "fail", None),
    ],
)
def test_each_cheat_is_caught(engine, cheat, verdict, code):
    report = verify(engine, cheat)
    allowed = verdict if isinstance(verdict, set) else {verdict}
    assert report.verdict in allowed, (report.verdict, report.findings, report.mismatches, report.errors)
    if code:
        assert code in codes(report), codes(report)


def test_mutating_cheat_also_aliases_its_input(engine):
    assert "output_aliases_input" in codes(verify(engine, "mutate_input"))


def test_extra_input_sets_are_checked(engine):
    report = verify(engine, "fixed_shape")
    assert report.mismatches and report.mismatches[0].reason.startswith("input set")


def test_degenerate_problem_is_reported(engine):
    report = verify(engine, "constant_candidate", prob=str(CHEATS / "degenerate_problem.py"))
    assert report.verdict == "pass"
    assert "degenerate_problem" in codes(report)


@pytest.mark.slow
def test_patched_timers_leave_a_clean_worker(engine):
    verify(engine, "patch_timer")
    report = verify(engine, "honest")
    assert report.verdict == "pass" and "timer_patched" not in codes(report)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fused_bias_gelu", "row_softmax", "gemm_bias_relu"])
def test_honest_examples_are_never_flagged(engine, name):
    report = engine.verify(
        problem(name), example(name, "triton"), target="triton", trials=2, baselines=["eager"], timing_budget_s=0.2
    )
    assert report.verdict == "pass"
    assert all(f.severity in ("info",) for f in report.findings), report.findings


def test_a_dlpack_export_is_not_compute():
    """CuTe DSL takes torch tensors through DLPack (zero-copy): the six honest CuTe kernels on the H100
    were flagged torch_compute_in_forward for __dlpack__ alone; a real op beside it still is."""
    import torch

    from kforge_mcp.judge.guards import TorchOpRecorder, torch_op_findings

    x = torch.ones(4)
    with TorchOpRecorder() as ops:
        x.__dlpack__()
        x.__dlpack_device__()
    assert ops.compute_ops() == {} and torch_op_findings(ops, launches=1) == []
    with TorchOpRecorder() as ops:
        x.__dlpack__()
        x.sum()
    assert set(ops.compute_ops()) == {"sum"}


@pytest.mark.parametrize(
    "source, flagged",
    [
        ("import torch\ny = torch.stack([a, b])", []),
        ("import numpy as np\ny = np.stack(xs)", []),
        ("import inspect\nframes = inspect.stack()", ["stack"]),
        ("import sys as s\nf = s._getframe(1)", ["_getframe"]),
        ("from gc import get_objects as objs\nall_ = objs()", ["get_objects"]),
        ("import gc\nall_ = gc.get_objects()", ["get_objects"]),
    ],
)
def test_introspection_is_named_by_the_module_that_owns_it(source, flagged):
    """torch.stack stacks tensors: only the frame and heap walkers of sys, inspect, gc are introspection."""
    from kforge_mcp.judge.guards import static_findings

    found = static_findings(source)
    assert [c for f in found for c in f.evidence["calls"]] == flagged
