"""Advice that knows convolutions, on real H100 profiles of Level 2 convolution kernels (tests/data/profiles): the
compute path read from what ran, not from a busy-looking pipe counter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kforge_mcp.advice import agent
from kforge_mcp.profiling.report import ProfileReport

DATA = Path(__file__).resolve().parent / "data" / "profiles"


def conv_fma_profile() -> ProfileReport:
    """A plain fp32 implicit-GEMM ConvTranspose2d + Mish + Add + Hardtanh + Scaling kernel (KernelBench L2 #16),
    profiled with Nsight Compute on an H100: FMA only."""
    return ProfileReport.model_validate(json.loads((DATA / "convtranspose2d-fma-h100.json").read_text()))


def test_an_fma_conv_whose_hmma_counter_reads_busy_is_told_to_use_tensor_cores():
    """The hmma pipe's counter also counts what issues through its pipe: a CUDA conv without MMAs read 3.26% there
    (as much as its shared pipe) while the tensor cores' own cycles read 0.06%. The path is FMA, and the advice is
    to use tensor cores, not to feed a tensor pipe it never used."""
    report = conv_fma_profile()
    conv = max(report.device_kernels(), key=lambda k: k.device_ms)
    del conv.metrics["ptx_mma"]  # a CUDA candidate: no Triton PTX in the profile
    conv.pipes["tensor_op_hmma"] = conv.pipes["shared"] = 3.26
    conv.metrics["tensor_cycles_pct"] = 0.06
    a = agent.analyze(report)
    assert conv.compute_path == "fma", conv.kind_basis
    assert "tensor cores 0.06% busy" in (conv.kind_basis or "")
    assert a.recommendations[0].rule == "use_tensor_cores", [r.rule for r in a.recommendations]
    assert "implicit GEMM" in a.recommendations[0].action and "The GEMM runs" not in a.recommendations[0].action
    assert "feed_tensor_pipe" not in [r.rule for r in a.recommendations]


def test_mma_instructions_are_read_where_the_cycles_counter_has_them():
    report = conv_fma_profile()
    conv = max(report.device_kernels(), key=lambda k: k.device_ms)
    del conv.metrics["ptx_mma"]
    conv.metrics["tensor_cycles_pct"] = 35.0
    agent.analyze(report)
    assert conv.compute_path == "hmma", conv.kind_basis


def test_a_lever_that_cuts_the_flops_of_an_fma_conv_is_priced_at_the_fma_rate(tmp_path):
    """KernelBench L2 #13 (ConvTranspose3d, a mean over depth, softmax) with its first kernel on the FMA pipe: the
    depth mean is linear in the input, 464 GFLOPs become 14.5. On the FMA pipe that is 6.9 ms of math down to 0.22;
    the bound's own drop (fp16 math down to the memory floor) says much less. At equal gain the lever leads."""
    from kforge_mcp.core.problem import Source, load_problem
    from kforge_mcp.judge.roofline import reference_roofline, with_measured
    from kforge_mcp.judge.structure import reference_levers

    report = ProfileReport.model_validate(json.loads((DATA / "convtranspose3d-mean-fma-h100.json").read_text()))
    name = "convtranspose3d_mean_add_softmax_tanh_scaling_l2.py"
    problem = load_problem(Source((DATA.parent.parent / "problems" / name).read_text(), name), tmp_path)
    roof = reference_levers(
        problem, "cpu", reference_roofline(problem, "cpu", report.device_name, atol=1e-4, rtol=1e-4)
    )
    report.roofline = with_measured(roof, 68.58)  # verify's median on the H100, outside ncu
    a = agent.analyze(report)
    lever = next(r for r in a.recommendations if r.rule == "reference_structure")
    assert lever.title.startswith("Reduce before the convolution") and "FMA pipe" in lever.gain_basis
    assert lever.expected_gain > 1 - roof.levers[0].sol_ms_after / roof.sol_ms
    assert a.recommendations[0] is lever, [(r.rule, r.expected_gain) for r in a.recommendations]


def test_kernels_that_reduce_a_convs_output_are_told_to_take_their_statistics_from_its_epilogue(tmp_path):
    """KernelBench L2 #38 (an average pool, ConvTranspose3d, clamp, a softmax over the 131072 positions of each
    channel) with a pool kernel, the conv, and a softmax kernel that reads the conv's 1 GB output back: the
    softmax's sums come from the conv's epilogue, and the action sets writing and re-reading that output against
    recomputing the conv, in this profile's figures."""
    from kforge_mcp.core.problem import Source, load_problem
    from kforge_mcp.judge.roofline import reference_roofline, with_measured

    report = ProfileReport.model_validate(json.loads((DATA / "convtranspose3d-softmax-fma-h100.json").read_text()))
    name = "convtranspose3d_avgpool_clamp_softmax_multiply_l2.py"
    problem = load_problem(Source((DATA.parent.parent / "problems" / name).read_text(), name), tmp_path)
    report.roofline = with_measured(
        reference_roofline(problem, "cpu", report.device_name, atol=1e-4, rtol=1e-4),
        7.66,  # verify's H100 median
    )
    fuse = next(r for r in agent.analyze(report).recommendations if r.rule == "fuse_launches")
    assert fuse.title == "Fold the 1 kernel(s) after the convolution into its epilogue"
    assert "atomics" in fuse.action and "recompute the convolution" in fuse.action and "1074 MB" in fuse.action
    assert "avgpool3d_kernel" in fuse.action  # the pool before the conv stays out of its main loop


def test_cp_async_loads_are_not_read_as_scalar_gathers():
    """A conv whose input tiles arrive by cp.async (no LDG ran: useful bytes per sector read 0) reads 18.9 sectors a
    request: 16-byte vector requests a little over, not 4-byte loads wasting 79% of every sector."""
    from kforge_mcp.advice.rules.memory import wasted_fraction

    report = ProfileReport.model_validate(
        json.loads((DATA / "convtranspose3d-relu-groupnorm-fma-h100.json").read_text())
    )
    conv = max(report.device_kernels(), key=lambda k: k.device_ms)
    assert conv.global_load_bytes_per_sector == 0 and conv.global_load_sectors_per_request > 16
    assert wasted_fraction(conv) < 0.2
    assert "uncoalesced_access" not in [r.rule for r in agent.analyze(report).recommendations]


def test_wasted_sectors_cost_little_where_warps_wait_on_something_else():
    """Gathers L1 serves while the warps wait on shared memory: coalescing them saves what the memory units' busy
    share allows, not the whole wasted fraction (a conv promised 78% there and gained 1.6%)."""
    from kforge_mcp.advice.rules.memory import wasted_fraction

    def gain(memory_pct: float, stall: str) -> float:
        report = conv_fma_profile()
        conv = max(report.device_kernels(), key=lambda k: k.device_ms)
        conv.global_load_bytes_per_sector, conv.memory_throughput_pct = 7.0, memory_pct
        conv.top_stalls[0].reason = stall
        assert wasted_fraction(conv) > 0.5
        a = agent.analyze(report)
        return next(r.expected_gain for r in [*a.recommendations, *a.no_gain] if r.rule == "uncoalesced_access")

    waiting_on_shared, waiting_on_loads = gain(20.0, "short_scoreboard"), gain(20.0, "long_scoreboard")
    assert waiting_on_shared < 0.3 * waiting_on_loads
    assert gain(85.0, "short_scoreboard") == pytest.approx(gain(85.0, "long_scoreboard"), abs=0.01)
