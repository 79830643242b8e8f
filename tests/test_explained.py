"""Failures that say what failed: parameters drawn in another order, the sandbox's refusals, inputs
larger than a worker may hold, a hang's line; and what a CPU-only user is told (placeholder peaks,
a roofline of bytes for a problem without products, autotuned kernels on the interpreter)."""

from __future__ import annotations

from pathlib import Path

from conftest import CANDIDATES, ROOT

PROBLEMS = ROOT / "tests" / "problems"
FAST = {"target": "triton", "trials": 1, "baselines": ["eager"], "timing_budget_s": 0.1}


# ---- weights matched by seed ----


def test_parameters_drawn_in_another_order_are_named_beside_the_mismatch(engine):
    problem = str(PROBLEMS / "layernorm_own_weights.py")
    swapped = (CANDIDATES / "layernorm_draw_order.py").read_text()
    report = engine.verify(problem, swapped, **FAST)
    assert report.verdict == "fail" and report.mismatches, report
    finding = next(f for f in report.findings if f.code == "weights_differ")
    assert "ModelNew.weight differs from Model.weight" in finding.message, finding.message
    assert "ModelNew.bias differs from Model.bias" in finding.message, finding.message
    assert f"seed {report.seed * 2**20}" in finding.message and "same order" in finding.message
    assert set(finding.evidence["parameters"]) == {"weight", "bias"}

    in_order = swapped.replace(
        "self.bias = nn.Parameter(torch.randn(hidden))\n        self.weight = nn.Parameter(torch.randn(hidden))",
        "self.weight = nn.Parameter(torch.randn(hidden))\n        self.bias = nn.Parameter(torch.randn(hidden))",
    )
    assert in_order != swapped
    report = engine.verify(problem, in_order, **FAST)
    assert report.verdict == "pass" and "weights_differ" not in {f.code for f in report.findings}, report
