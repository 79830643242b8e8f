"""The rules' expected gains against gains measured on the H200 (tests/data/advice-calibration: the before/after
pairs bench/analysis/pair_capture.py captured, digested by bench/digests.py), and the behaviour the calibration
asks of the rules: latency-bound kernels get latency advice and never tensor-pipe advice, nothing is folded into a
busy GEMM's main loop, feed_tensor_pipe counts its gain once, and every gain says how it was estimated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kforge_mcp.advice import agent
from kforge_mcp.advice.calibration import Pair, analyze_measured, calibrate
from kforge_mcp.advice.kinds import classify, is_latency_bound
from kforge_mcp.advice.rules import feed_tensor_pipe, fuse_launches
from kforge_mcp.advice.rules.compute import COMPUTE
from kforge_mcp.core.schemas import Convolution
from kforge_mcp.judge.roofline import make_roofline, with_measured
from kforge_mcp.platforms.nvidia.advice_terms import VOCABULARY as NVIDIA
from kforge_mcp.platforms.nvidia.ncu import report_from_csv
from kforge_mcp.profiling.report import KernelProfile, ProfileReport, StallReason

PAIRS = Path(__file__).resolve().parent / "data" / "advice-calibration"
H200 = "NVIDIA H200"


@pytest.fixture(scope="module")
def captured() -> tuple[str, dict[str, Pair]]:
    """The device and every pair, its before kernel's raw page parsed."""
    data = json.loads((PAIRS / "pairs.json").read_text())
    pairs = {
        p["name"]: Pair(**p, before=report_from_csv((PAIRS / f"{p['name']}.ncu-raw.csv").read_text(), forwards=1))
        for p in data["pairs"]
    }
    return data["device"], pairs


def analyze_pair(captured, name: str):
    device, pairs = captured
    pair = pairs[name]
    report = pair.before.model_copy(deep=True)
    return report, analyze_measured(report, pair.workload, device, pair.before_ms)


def test_the_committed_h200_pairs_meet_the_targets(captured):
    device, pairs = captured
    assert not json.loads((PAIRS / "pairs.json").read_text())["skipped"]
    cal = calibrate(list(pairs.values()), device)
    assert len(cal.scores) >= 25 and cal.rules >= 8
    assert cal.sign_right >= 0.9 and not cal.harmful and cal.median_gap_points <= 10
    assert cal.ok


def test_each_pair_holds_its_own_before_kernels(captured):
    for name in ("fuse_elementwise", "fuse_split_into_gemm"):
        report, _ = analyze_pair(captured, name)
        assert len(report.kernels) >= 2 and not any("marker" in k.name for k in report.kernels)


def test_a_latency_bound_conv_gets_latency_advice_never_tensor_pipe_advice(captured):
    report, a = analyze_pair(captured, "latency_conv_bf16")
    conv = report.kernels[0]
    assert conv.category == "conv" and conv.compute_path.startswith("wgmma") and is_latency_bound(conv, NVIDIA)
    rules = [r.rule for r in a.recommendations]
    assert rules[0] == "latency_bound" and "feed_tensor_pipe" not in rules and "use_tensor_cores" not in rules
    action = a.recommendations[0].action
    assert "more independent work" in action and "async copies" in action and "coalesced" in action
    assert any(e.metric == "tensor pipe busy" for e in a.recommendations[0].evidence)


def synthetic_conv(**kw) -> KernelProfile:
    k = dict(
        name="conv_transpose3d_gather_kernel",
        launches=1,
        device_ms=2.0,
        mean_ms=2.0,
        grid=[4096, 1, 1],
        block=[128, 1, 1],
        pipes={"tensor_op_gmma": 6.0, "fma": 4.0},
        issue_active_pct=14.0,
        sm_throughput_pct=20.0,
        memory_throughput_pct=30.0,
        dram_throughput_pct=14.0,
        top_stalls=[
            StallReason(reason="long_scoreboard", cycles_per_issue=20.0),
            StallReason(reason="lg_throttle", cycles_per_issue=9.0),
        ],
    )
    k.update(kw)
    return KernelProfile(**k)


def one_kernel(k: KernelProfile, roofline=None) -> ProfileReport:
    return ProfileReport(
        source="ncu",
        kernels=[k],
        forwards=1,
        launches_per_forward=1,
        device_ms_per_forward=k.device_ms,
        device_name=H200,
        roofline=roofline,
    )


def test_a_gather_conv_whose_tensor_pipe_idles_is_latency_bound_not_unfed():
    roof = make_roofline(2e11, 5.4e8, "fp32", H200, 2.0, atol=1e-4, rtol=1e-4)
    a = agent.analyze(one_kernel(synthetic_conv(), roof))
    rules = [r.rule for r in a.recommendations]
    assert rules and rules[0] == "latency_bound" and "feed_tensor_pipe" not in rules
    # the same conv with its tensor pipe busy and no latency stalls is a feeding problem again
    fed = synthetic_conv(
        pipes={"tensor_op_gmma": 55.0},
        issue_active_pct=30.0,
        memory_throughput_pct=70.0,
        top_stalls=[StallReason(reason="barrier", cycles_per_issue=3.0)],
    )
    assert not is_latency_bound(classify(fed, NVIDIA), NVIDIA)
    assert "feed_tensor_pipe" in [r.rule for r in agent.analyze(one_kernel(fed, roof)).recommendations]


# KernelBench L2 49_ConvTranspose3d_Softmax_Sigmoid (tests/problems/convtranspose3d_softmax_sigmoid_l2.py) as counted
CONV_T3D = Convolution(
    op="conv_transpose3d",
    transposed=True,
    batch=16,
    c_in=32,
    c_out=64,
    kernel=[3, 3, 3],
    stride=[2, 2, 2],
    padding=[1, 1, 1],
    dilation=[1, 1, 1],
    in_spatial=[16, 32, 32],
    out_spatial=[32, 64, 64],
    flops=2 * 16 * 16 * 32 * 32 * 32 * 64 * 27,
)
CONV_T3D_OUT = 16 * 64 * 32 * 64 * 64 * 4
CONV_T3D_BYTES = 16 * 32 * 16 * 32 * 32 * 4 + (32 * 64 * 27 + 64) * 4 + CONV_T3D_OUT


def conv_roofline(ms: float):
    """The conv problem's bound at KernelBench's 1e-2: memory-bound on its 537 MB output write."""
    return make_roofline(
        CONV_T3D.flops,
        CONV_T3D_BYTES,
        "fp32",
        H200,
        ms,
        atol=1e-2,
        rtol=1e-2,
        out_bytes=CONV_T3D_OUT,
        convs=[CONV_T3D],
        flops_by_op={"convolution": CONV_T3D.flops},
    )


def test_a_conv_known_by_the_problems_kind_is_latency_bound_and_told_its_output_floor():
    """A kernel whose name says nothing, in a convolution problem, its tensor pipe 6% busy, issue and DRAM low and
    warps on long-scoreboard stalls: the convolution, latency-bound, never told to feed its tensor cores."""
    k = synthetic_conv(name="fused_kernel_0")
    a = agent.analyze(one_kernel(k, conv_roofline(2.0)))
    assert k.category == "conv" and "convolution FLOPs" in k.kind_basis and is_latency_bound(k, NVIDIA)
    rules = [r.rule for r in a.recommendations]
    assert rules[0] == "latency_bound" and "feed_tensor_pipe" not in rules and "use_tensor_cores" not in rules
    action = a.recommendations[0].action
    assert "more independent work" in action and "async copies" in action and "coalesced" in action
    assert "floor is the output write (537 MB" in action
    assert any(e.metric == "the problem's bound" for e in a.recommendations[0].evidence)
    assert "Bound (convolution (transposed 3d)): memory-bound: the floor is the 537 MB output write" in a.summary
    # the same kernel in a GEMM problem is no convolution: its name and a 6% pipe say nothing
    gemm_roof = make_roofline(2 * 1024**3, 3 * 4 * 1024**2, "fp32", H200, 2.0)
    assert classify(synthetic_conv(name="fused_kernel_0"), NVIDIA, True).category == "other"
    assert "latency_bound" in [
        r.rule for r in agent.analyze(one_kernel(synthetic_conv(name="k"), gemm_roof)).recommendations
    ]


def test_a_latency_bound_fma_conv_gets_latency_advice_before_tensor_cores():
    """No MMA at all and a 4% FMA pipe: the longest kernel of a convolution problem does its FLOPs; moving them to
    tensor cores saves only the time its math pipe is busy, so the latency advice leads."""
    k = synthetic_conv(name="kernel_0", pipes={"tensor_op_gmma": 0.0, "fma": 4.0}, fma_pipe_pct=4.0)
    a = agent.analyze(one_kernel(k, conv_roofline(2.0)))
    assert (k.category, k.compute_path) == ("conv", "fma") and "longest kernel" in k.kind_basis
    recs = {r.rule: r for r in a.recommendations}
    assert a.recommendations[0].rule == "latency_bound"
    assert (
        recs["use_tensor_cores"].expected_gain < 0.05
        and "FMA pipe busy fraction" in recs["use_tensor_cores"].gain_basis
    )


def test_fuse_launches_folds_nothing_into_a_gemm_whose_pipe_is_busy(captured):
    report, a = analyze_pair(captured, "fuse_split_into_gemm")
    gemm = next(k for k in report.kernels if k.category == "gemm")
    assert gemm.tensor_pipe_pct >= 50 and "fuse_launches" not in [r.rule for r in a.recommendations]
    # an epilogue after a busy GEMM does fold in, for its own share of the time, at low priority
    report, a = analyze_pair(captured, "fuse_gemm_epilogue")
    rec = next(r for r in a.recommendations if r.rule == "fuse_launches")
    epilogue = next(k for k in report.kernels if k.name == "bias_relu_kernel")
    assert rec.kernels == ["bias_relu_kernel"] and rec.priority == "low"
    assert rec.expected_gain == pytest.approx(epilogue.device_ms / report.device_ms_per_forward, abs=1e-3)


def test_fuse_launches_on_a_synthetic_split_before_a_91_percent_busy_gemm():
    split = KernelProfile(name="split_bf16_kernel", launches=2, device_ms=0.06, mean_ms=0.03, dram_throughput_pct=73)
    gemm = KernelProfile(
        name="gemm_bf16x3_kernel", launches=1, device_ms=0.9, mean_ms=0.9, pipes={"tensor_op_gmma": 91.0}
    )
    report = ProfileReport(
        source="ncu", kernels=[split, gemm], forwards=1, launches_per_forward=3, device_ms_per_forward=0.96
    )
    for k in report.kernels:
        classify(k, NVIDIA)
    assert fuse_launches(report) == []
    # without the busy GEMM the same two launches are a memory-bound chain: the old model holds
    gemm.pipes = {}
    gemm.name = "scale_kernel"
    classify(gemm, NVIDIA)
    recs = fuse_launches(report)
    assert recs and recs[0].expected_gain == pytest.approx(1 - 0.9 / 0.96, abs=1e-3)


def test_feed_tensor_pipe_counts_its_gain_once():
    k = KernelProfile(
        name="gemm_kernel",
        launches=1,
        device_ms=1.0,
        mean_ms=1.0,
        grid=[264, 1, 1],
        pipes={"tensor_op_gmma": 85.0},
        issue_active_pct=30.0,
        top_stalls=[StallReason(reason="barrier", cycles_per_issue=2.0)],
    )
    roof = make_roofline(2 * 8192**3, 3 * 2 * 8192**2, "bf16", H200)
    roof = with_measured(roof, roof.sol_ms / 0.5)  # half the bound, with a busy pipe: small MMA shapes
    report = one_kernel(classify(k, NVIDIA), roof)
    rec = feed_tensor_pipe(report)[0]
    assert rec.expected_gain == pytest.approx(1 - 0.5 / COMPUTE.limit_fraction, abs=1e-3)


def test_every_gain_says_how_it_was_estimated(captured):
    _, pairs = captured
    seen = set()
    for name in pairs:
        _, a = analyze_pair(captured, name)
        for r in a.recommendations:
            assert len(r.gain_basis) > 30, (name, r.rule, r.gain_basis)
            seen.add(r.rule)
    assert {"fuse_launches", "latency_bound", "uncoalesced_access", "use_tensor_cores", "feed_tensor_pipe"} <= seen


def test_coalescing_a_dram_bound_kernel_that_moves_no_extra_dram_bytes_is_not_advised(captured):
    report, a = analyze_pair(captured, "coalesce_pairs")
    k = report.kernels[0]
    assert k.dram_throughput_pct >= 60 and "uncoalesced_access" not in [r.rule for r in a.recommendations]
    _, a = analyze_pair(captured, "coalesce_transpose")
    assert a.recommendations[0].rule == "uncoalesced_access" and a.recommendations[0].expected_gain > 0.6
