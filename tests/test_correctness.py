"""The comparison rules, on tensors made here: no worker needed."""

from __future__ import annotations

import torch

from kforge_mcp.judge.correctness import compare_outputs, tolerance_for


def test_per_dtype_defaults():
    assert tolerance_for(torch.float32, None, None) == (1e-4, 1e-4)
    assert tolerance_for(torch.bfloat16, None, None) == (1e-2, 1e-2)
    assert tolerance_for(torch.float16, 0.5, None) == (0.5, 1e-2)


def test_equal_outputs_pass_and_nan_never_does():
    x = torch.randn(8, 8)
    assert compare_outputs(x, x.clone(), 0, None, None) is None
    y = x.clone()
    y[2, 3] = float("nan")
    m = compare_outputs(x, y, 1, None, None)
    assert m is not None and m.first_mismatch_index == [2, 3] and "NaN" in m.reason and m.trial == 1
    both = x.clone()
    both[0, 0] = float("nan")
    assert compare_outputs(both, both.clone(), 0, None, None) is not None  # NaN == NaN is still a failure


def test_mismatch_reports_errors_and_location():
    x = torch.zeros(4, 5)
    y = x.clone()
    y[1, 2] = 0.5
    m = compare_outputs(x, y, 0, None, None)
    assert m.first_mismatch_index == [1, 2] and m.max_abs_error == 0.5 and m.expected == 0.0 and m.got == 0.5
    assert m.mismatched_fraction == 1 / 20


def test_shape_dtype_and_structure_are_checked():
    x = torch.randn(4, 4)
    assert "shape" in compare_outputs(x, torch.randn(4, 5), 0, None, None).reason
    assert "dtype" in compare_outputs(x, x.double(), 0, None, None).reason
    assert "2 outputs" in compare_outputs((x, x), x, 0, None, None).reason
    assert compare_outputs((x, x + 1), [x.clone(), x + 1], 0, None, None) is None


def test_matching_infinities_pass():
    x = torch.tensor([float("inf"), 1.0])
    assert compare_outputs(x, x.clone(), 0, None, None) is None
    assert compare_outputs(x, torch.tensor([float("-inf"), 1.0]), 0, None, None) is not None
