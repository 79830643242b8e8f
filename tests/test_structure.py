"""Levers of the reference's structure (its FX graph) that no profile shows, priced in the roofline's
terms; their advice; and caching a weight transform by parameter version against the guards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kforge_mcp.advice.agent import analyze
from kforge_mcp.core.problem import Source, load_problem
from kforge_mcp.judge.roofline import reference_roofline
from kforge_mcp.judge.structure import reference_levers
from kforge_mcp.profiling.report import KernelProfile, ProfileReport

TESTS = Path(__file__).resolve().parent
PROBLEMS = TESTS / "problems"
CHEATS = TESTS / "cheats"
F32 = 4


def levers_of(name: str, tmp_path, atol=None, rtol=None, device_name="H200"):
    problem = load_problem(Source((PROBLEMS / f"{name}.py").read_text(), f"{name}.py"), tmp_path)
    roof = reference_levers(problem, "cpu", reference_roofline(problem, "cpu", device_name, atol=atol, rtol=rtol))
    return roof, {lv.kind: lv for lv in roof.levers}


def test_a_sum_over_a_linears_features_folds_into_a_gemv(tmp_path):
    roof, by_kind = levers_of("gemm_sum", tmp_path)
    fold = by_kind["fold_reduction"]
    assert fold.nodes[0] == "linear" and fold.nodes[-1].startswith("sum")  # the divide between them folds in
    assert roof.flops == 2 * 16 * 64 * 96 and fold.flops_after == 2 * 16 * 64  # GEMM -> GEMV, by FlopCounterMode
    # the [96 x 64] weight and 96-bias become a [1 x 64] weight and one bias, read once (the roofline's bytes)
    assert fold.bytes_saved == (96 * 64 + 96 - 64 - 1) * F32
    assert fold.bytes_after == roof.bytes - fold.bytes_saved
    assert fold.sol_ms_after < roof.sol_ms


def test_reductions_over_the_dim_of_size_1_a_fold_leaves_are_named_identities(tmp_path):
    _, by_kind = levers_of("gemm_sum_then_identities", tmp_path)
    fold = by_kind["fold_reduction"]
    assert fold.nodes[-1] == "logsumexp_1" and "max_1" in fold.nodes and "mean" in fold.nodes
    assert "identity" in fold.action and fold.flops_after == 2 * 16 * 64


def test_a_matmul_with_a_transposed_weight_parameter_folds_too(tmp_path):
    _, by_kind = levers_of("matmul_divide_sum", tmp_path)
    fold = by_kind["fold_reduction"]
    assert fold.flops_after == 2 * 16 * 64 and fold.bytes_saved == (96 * 64 - 64) * F32  # no bias
    assert "weight_once" not in by_kind  # weight.T is a view: no work on the weight


def test_an_average_pool_over_features_folds_into_a_smaller_linear(tmp_path):
    _, by_kind = levers_of("gemm_avgpool", tmp_path)
    fold = by_kind["fold_reduction"]
    assert [n for n in fold.nodes] == ["matmul", "unsqueeze", "avg_pool"]  # the GELU and the max stay
    assert fold.flops_after == 2 * 8 * 32 * (64 // 8)
    assert fold.bytes_saved == (64 * 32 + 64 - 8 * 32 - 8) * F32


def test_a_sum_over_the_rows_sums_the_input_first(tmp_path):
    _, by_kind = levers_of("gemm_rows_sum", tmp_path)
    fold = by_kind["fold_reduction"]
    assert fold.flops_after == 2 * 64 * 96 and fold.bytes_saved == 0  # the same weight, one row
    assert "sum_i" in fold.detail


@pytest.mark.parametrize("name", ["gemm_max", "gemm_square_sum"])
def test_what_is_not_linear_does_not_fold(tmp_path, name):
    _, by_kind = levers_of(name, tmp_path)
    assert "fold_reduction" not in by_kind and "constant_output" not in by_kind


def test_a_graph_symbolic_trace_cannot_follow_is_read_through_torch_export(tmp_path):
    import torch.fx

    problem = load_problem(Source((PROBLEMS / "gemm_sum_branchy.py").read_text(), "b.py"), tmp_path)
    with pytest.raises(torch.fx.proxy.TraceError):
        torch.fx.symbolic_trace(problem.module.Model(64, 96))
    _, by_kind = levers_of("gemm_sum_branchy", tmp_path)
    assert by_kind["fold_reduction"].flops_after == 2 * 16 * 64


def test_work_on_weights_alone_is_named_with_what_a_forward_redoing_it_moves(tmp_path):
    _, by_kind = levers_of("scaled_weight", tmp_path)
    once = by_kind["weight_once"]
    assert once.nodes == ["mul", "contiguous"]  # the transpose between them is a free view
    assert once.evidence["parameters"] == "gain, weight"
    # read weight and gain, write the product; read it, write the contiguous copy
    assert once.evidence["bytes_per_forward_if_redone"] == (2 * 96 * 64 + 96 + 2 * 96 * 64) * F32
    assert once.bytes_saved == 96 * F32  # cached, the gain vector is no longer read
    assert "fold_reduction" not in by_kind


def test_a_weight_the_path_converts_is_converted_once(tmp_path):
    """At 1e-2 an fp32 problem's bound runs on fp16: a cached fp16 weight halves the weight's bytes."""
    roof, _ = levers_of("gemm_max", tmp_path, atol=1e-2, rtol=1e-2)
    assert roof.path == "fp16"
    convert = next(lv for lv in roof.levers if lv.kind == "weight_once")
    assert convert.bytes_saved == 96 * 64 * F32 / 2
    _, strict = levers_of("gemm_max", tmp_path)  # at 1e-4 the path (3xTF32) splits in registers: no lever
    assert "weight_once" not in strict


def test_an_output_constant_on_the_inputs_is_a_lever_and_where_it_starts_is_named(tmp_path):
    _, by_kind = levers_of("gemm_constant", tmp_path)
    const = by_kind["constant_output"]
    assert "sub" in const.detail and "degenerate_problem" in const.detail  # x - mean over a dim of size 1
    assert const.flops_after == 0 and const.bytes_after == 16 * 1 * F32  # only the output is written
    assert "gemm" in const.nodes


def test_levers_a_profile_found_on_its_device_survive_a_roofline_recomputed_elsewhere(tmp_path):
    """analyze_profile recomputes the roofline on a CPU worker, which skips the constant check past a
    size; the levers the profile's own worker found are kept, priced on the new roofline's peaks."""
    from kforge_mcp.judge.structure import carry_levers

    earlier, _ = levers_of("gemm_constant", tmp_path)
    problem = load_problem(Source((PROBLEMS / "gemm_constant.py").read_text(), "c.py"), tmp_path)
    fresh = reference_roofline(problem, "cpu", "A100 80GB")
    carried = carry_levers(fresh, earlier)
    const = next(lv for lv in carried.levers if lv.kind == "constant_output")
    assert const.sol_ms_after == pytest.approx(const.bytes_after / fresh.peak_bandwidth * 1e3)
    assert const.sol_ms_after != next(lv for lv in earlier.levers if lv.kind == "constant_output").sol_ms_after
    assert len(carry_levers(carried, earlier).levers) == len(carried.levers)  # never twice


def test_a_carried_conversion_follows_the_path_the_bound_settles_on(tmp_path):
    """The paths are measured after the levers are read: a bf16x3 bound keeps the weight in two bf16 parts
    (as many bytes as fp32, the split done once), a 3xTF32 one splits in registers and needs no lever."""
    from kforge_mcp.judge.structure import carry_levers

    earlier, _ = levers_of("gemm_max", tmp_path, atol=1e-2, rtol=1e-2)
    split = carry_levers(earlier.model_copy(update={"path": "bf16x3", "levers": []}), earlier)
    (lever,) = split.levers
    assert "bf16x3" in lever.title and lever.evidence["converted_bytes"] == 96 * 64 * F32
    assert lever.bytes_saved == 0 and lever.evidence["bytes_per_forward_if_redone"] == 2 * 96 * 64 * F32
    assert carry_levers(earlier.model_copy(update={"path": "3xtf32", "levers": []}), earlier).levers == []


def _report(roof, kernel_ms: float, busy: float) -> ProfileReport:
    from kforge_mcp.judge.roofline import with_measured

    k = KernelProfile(
        name="gemm_kernel", launches=1, device_ms=kernel_ms, mean_ms=kernel_ms, tensor_pipe_pct=busy, category="gemm"
    )
    k.pipes["tensor_op_hmma"] = busy
    return ProfileReport(
        source="ncu",
        device_name="H200",
        kernels=[k],
        device_ms_per_forward=kernel_ms,
        roofline=with_measured(roof, kernel_ms),
    )


def test_the_fold_leads_the_advice_past_a_kernel_at_its_limit(tmp_path):
    """A GEMM at 95% of its bound would get 'stop here'; the fold lowers the bound itself, so it leads,
    with a gain the old bound does not cap, and the stop is withdrawn."""
    roof, _ = levers_of("gemm_sum", tmp_path)
    out = analyze(_report(roof, roof.sol_ms / 0.95, busy=97.0))
    top = out.recommendations[0]
    assert top.rule == "reference_structure" and top.lowers_bound and top.priority == "high"
    assert top.expected_gain > 0.5 > 1 - 0.95  # above the 5% the old bound leaves
    assert not out.stop and not any(r.stop for r in out.recommendations)
    # the kernel is still at its limit: that saves nothing, so it is set apart, and says what is left
    limit = next(r for r in out.no_gain if r.rule == "at_the_limit")
    assert "The reference's structure allows less work, though" in limit.action


def test_without_levers_the_stop_stands(tmp_path):
    roof, _ = levers_of("gemm_max", tmp_path)
    out = analyze(_report(roof, roof.sol_ms / 0.95, busy=97.0))
    assert out.stop and out.recommendations[0].rule == "at_the_limit"


def test_profile_and_analyze_profile_carry_the_levers(engine, capsys):
    from kforge_mcp.cli.reports import print_profile

    problem = str(PROBLEMS / "gemm_sum.py")
    report = engine.profile(problem, device="cpu", iterations=2)
    assert [lv.kind for lv in report.roofline.levers] == ["fold_reduction"], report.roofline
    print_profile(report)
    assert "lever Fold the sum into the Linear" in capsys.readouterr().out
    advice = engine.analyze_profile(profile=report.model_dump(), problem=problem)
    assert [lv.kind for lv in advice.roofline.levers] == ["fold_reduction"]
    rec = next(r for r in advice.recommendations if r.rule == "reference_structure")
    assert "GEMV" in rec.action and "_version" in rec.action


# ---- caching a weight transform against the guards ----


def _verify(engine, candidate: str):
    return engine.verify(
        str(PROBLEMS / "gemm_sum.py"),
        str(CHEATS / f"{candidate}.py"),
        target="triton",
        trials=3,
        baselines=["eager"],
        timing_budget_s=0.2,
    )


def test_a_weight_cache_keyed_on_the_parameters_version_passes_every_guard(engine):
    report = _verify(engine, "fold_weight_cache")
    assert report.verdict == "pass", (report.findings, report.mismatches, report.errors)
    assert all(f.severity == "info" for f in report.findings), report.findings


def test_an_output_cache_keyed_on_the_inputs_address_is_caught(engine):
    report = _verify(engine, "fold_output_memo")
    assert report.verdict == "fail", (report.findings, report.mismatches)
    assert report.mismatches


FOLLOWS = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("cand", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
model, x = mod.ModelNew(64, 96, 1.5), torch.randn(16, 64)
with torch.no_grad():
    for step in range(2):
        expected = (model.linear(x) / 2).sum(dim=1, keepdim=True) * 1.5
        torch.testing.assert_close(model(x), expected, rtol=1e-4, atol=1e-4)
        model.linear.weight.mul_(-2.0)
print("followed")
"""


def test_the_weight_cache_follows_a_changed_weight():
    """What makes the cache honest: an in-place update bumps the parameter's _version and the next
    forward pre-reduces again (the candidate runs in a child process, through Triton's interpreter)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", FOLLOWS, str(CHEATS / "fold_weight_cache.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0 and "followed" in proc.stdout, proc.stderr[-2000:]


def test_a_mean_over_depth_of_a_convolution_reduces_its_input_first(tmp_path):
    """mean_d (conv_transpose3d(x) * 2)[d] = the kernel's depth taps applied to x summed over depth: the FLOPs
    shrink by the depth the convolution runs over (6 input slices), and the bound with them."""
    roof, by_kind = levers_of("conv_transpose3d_mean_softmax", tmp_path)
    lever = by_kind["reduce_first"]
    assert lever.nodes[:3] == ["conv_transpose", "mul", "mean"]
    conv = 2 * 2 * 4 * 8 * 27 * 6 * 8 * 8  # FlopCounterMode's count: each input pixel meets every tap
    assert lever.evidence["convolution_flops"] == conv and lever.flops_saved == conv - conv / 6
    assert "2-D convolution" in lever.action and lever.bytes_saved == 0
    assert lever.sol_ms_after < roof.sol_ms


def test_a_nonlinearity_between_a_convolution_and_its_mean_keeps_the_convolution(tmp_path):
    _, by_kind = levers_of("conv2d_tanh_mean", tmp_path)
    assert "reduce_first" not in by_kind


def test_the_parameters_a_normalization_removes_are_named_and_the_scale_is_not(tmp_path):
    """ConvTranspose3d, a training-mode BatchNorm3d, then the spatial mean subtracted: the BatchNorm removes the
    convolution's bias (a per-channel constant), and the mean subtraction removes the BatchNorm's shift; its scale
    and the convolution's weight change the output."""
    roof, by_kind = levers_of("conv_transpose3d_bn_subtract", tmp_path)
    lever = by_kind["cancelled_parameters"]
    assert lever.evidence["parameters"] == "conv_transpose.bias, batch_norm.bias"
    assert lever.nodes == ["conv_transpose", "batch_norm"]
    out = 4 * 32 * 15 * 31 * 31  # (8 - 1) * 2 - 2 + 3 = 15 deep, 31 high and wide: an add an element, twice
    assert lever.flops_saved == 2 * out and lever.bytes_saved == 2 * 32 * F32
    assert "in fp64" in lever.detail and "batch_norm.weight" not in lever.action


def test_a_parameter_the_forward_never_reads_is_named(tmp_path):
    _, by_kind = levers_of("linear_unread_bias", tmp_path)
    lever = by_kind["cancelled_parameters"]
    assert lever.evidence["parameters"] == "bias" and lever.nodes == [] and lever.flops_saved == 0


def test_a_bias_a_nonlinearity_keeps_is_not_cancelled(tmp_path):
    _, by_kind = levers_of("conv2d_tanh_mean", tmp_path)  # tanh before the mean: the bias changes the output
    assert "cancelled_parameters" not in by_kind
