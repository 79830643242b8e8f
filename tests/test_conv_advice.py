"""Advice that knows convolutions, on real H100 profiles of Level 2 convolution kernels (tests/data/profiles): the
compute path read from what ran, not from a busy-looking pipe counter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kforge_mcp.advice import agent
from kforge_mcp.platforms.nvidia.advice_terms import VOCABULARY as NVIDIA
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


def test_a_trace_of_tensor_cycles_is_not_read_as_mmas():
    """An FMA-only direct conv read 1.39% tensor cycles (and as much on the hmma pipe) on an H200: no MMA ran, and
    the advice is to use tensor cores, not to feed them."""
    report = conv_fma_profile()
    conv = max(report.device_kernels(), key=lambda k: k.device_ms)
    del conv.metrics["ptx_mma"]
    conv.metrics["tensor_cycles_pct"] = conv.pipes["tensor_op_hmma"] = 1.39
    a = agent.analyze(report)
    assert conv.compute_path == "fma", conv.kind_basis
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
    a = agent.analyze(report)
    fuse = next(r for r in [*a.recommendations, *a.no_gain] if r.rule == "fuse_launches")
    assert fuse.title == "Fold the 1 kernel(s) after the convolution into its epilogue"
    assert "atomics" in fuse.action and "recompute the convolution" in fuse.action and "1074 MB" in fuse.action
    assert "avgpool3d_kernel" in fuse.action  # the pool before the conv stays out of its main loop
    # the softmax's 1.1 ms less the normalize pass that stays (the 1 GB output read and written, 0.64 ms at peak)
    # and what the sums add to the conv: little left (the kernel that took them realized -5%)
    assert fuse.expected_gain < 0.05 and "0.641 ms at peak bandwidth" in fuse.gain_basis


def test_cp_async_loads_are_not_read_as_scalar_gathers():
    """A conv whose input tiles arrive by cp.async (no LDG ran: useful bytes per sector read 0) reads 18.9 sectors a
    request: 16-byte vector requests a little over, not 4-byte loads wasting 79% of every sector."""
    from kforge_mcp.advice.rules.memory import wasted_fraction

    report = ProfileReport.model_validate(
        json.loads((DATA / "convtranspose3d-relu-groupnorm-fma-h100.json").read_text())
    )
    conv = max(report.device_kernels(), key=lambda k: k.device_ms)
    assert conv.global_load_bytes_per_sector == 0 and conv.global_load_sectors_per_request > 16
    assert wasted_fraction(conv, NVIDIA) < 0.2
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
        assert wasted_fraction(conv, NVIDIA) > 0.5
        a = agent.analyze(report)
        return next(r.expected_gain for r in [*a.recommendations, *a.no_gain] if r.rule == "uncoalesced_access")

    waiting_on_shared, waiting_on_loads = gain(20.0, "short_scoreboard"), gain(20.0, "long_scoreboard")
    assert waiting_on_shared < 0.3 * waiting_on_loads
    assert gain(85.0, "short_scoreboard") == pytest.approx(gain(85.0, "long_scoreboard"), abs=0.01)


def _step1(tmp_path, profile: str, name: str, measured_ms: float) -> ProfileReport:
    """A tensor-core step of a Level 2 convolution as the H100 profiled it, with its problem's roofline."""
    from kforge_mcp.core.problem import Source, load_problem
    from kforge_mcp.judge.roofline import reference_roofline, with_measured
    from kforge_mcp.judge.structure import reference_levers

    report = ProfileReport.model_validate(json.loads((DATA / profile).read_text()))
    problem = load_problem(Source((DATA.parent.parent / "problems" / name).read_text(), name), tmp_path)
    roof = reference_roofline(problem, "cpu", report.device_name, atol=1e-4, rtol=1e-4)
    report.roofline = with_measured(reference_levers(problem, "cpu", roof), measured_ms)
    return report


def test_a_conv_waiting_on_its_own_gathers_is_told_to_feed_them_not_to_add_tma(tmp_path):
    """KernelBench L2 #46 as a bf16x3 implicit GEMM gathering its input through masks (tensor pipe 7% busy, warps on
    long_scoreboard, 30 sectors a request): the lever is a plain operand tile (channels-last input, K by tap), priced
    from the conv's FLOPs at a first kernel's fraction of its path plus the re-layout, not TMA and 128x256 tiles."""
    report = _step1(tmp_path, "conv2d-subtract-bf16x3-h100.json", "conv2d_subtract_tanh_subtract_avgpool_l2.py", 12.91)
    a = agent.analyze(report)
    rules = [r.rule for r in a.recommendations]
    assert rules[0] == "gather_fed_conv", rules
    assert "feed_tensor_pipe" not in rules
    top = a.recommendations[0]
    assert "channels-last" in top.action and "1074 MB" in top.action and "tap by tap" in top.action
    assert "parity" not in top.action  # a direct convolution: no output parity to split
    assert "re-layout" in top.gain_basis and 0.2 < top.expected_gain < 0.95


def test_a_conv_fed_by_tma_is_fed_as_a_gemm_is(tmp_path):
    report = _step1(tmp_path, "conv2d-subtract-bf16x3-h100.json", "conv2d_subtract_tanh_subtract_avgpool_l2.py", 12.91)
    conv = max(report.device_kernels(), key=lambda k: k.device_ms)
    conv.pipes["tma"] = 12.0
    rules = [r.rule for r in agent.analyze(report).recommendations]
    assert "gather_fed_conv" not in rules and "feed_tensor_pipe" in rules


def test_a_strided_transposed_conv_is_told_what_masked_taps_cost(tmp_path):
    """KernelBench L2 #16 (ConvTranspose2d, kernel 3, stride 2): an output pixel meets 2.25 of the 9 taps, so a K
    loop over all of them multiplies 75% masked zeros; the action says so and how to split by parity."""
    name = "convtranspose2d_mish_add_hardtanh_scaling_l2.py"
    a = agent.analyze(_step1(tmp_path, "convtranspose2d-bf16x3-h100.json", name, 5.28))
    top = a.recommendations[0]
    assert top.rule == "gather_fed_conv", [r.rule for r in a.recommendations]
    assert "2.2 of its 9 taps" in top.action and "75% masked zeros" in top.action and "4 classes" in top.action


def test_a_lever_the_kernels_have_taken_is_not_advised_again(tmp_path):
    """#13 after reducing before the convolution: its kernels ran 2.5 ms with the FMA pipe 11% busy and the tensor
    pipe idle, which cannot have done the 449 GFLOPs the lever removes; the lever is taken. The step before it
    (tests above: 68.6 ms on the FMA pipe) is still told to take it."""
    name = "convtranspose3d_mean_add_softmax_tanh_scaling_l2.py"
    report = _step1(tmp_path, "convtranspose3d-mean-reduced-first-h100.json", name, 2.5)
    assert report.roofline.levers and report.roofline.levers[0].kind == "reduce_first"
    a = agent.analyze(report)
    assert "reference_structure" not in [r.rule for r in [*a.recommendations, *a.no_gain]]


def test_a_lever_the_kernels_have_taken_sets_their_bound(tmp_path):
    """Once the lever is taken, the bound is the lever's: the fraction of speed of light is the forward's as its
    kernels run it, and tensor cores are priced on the FLOPs left (14.5 GFLOPs, not 464)."""
    name = "convtranspose3d_mean_add_softmax_tanh_scaling_l2.py"
    report = _step1(tmp_path, "convtranspose3d-mean-reduced-first-h100.json", name, 2.5)
    before = report.roofline.fraction_of_sol
    agent.analyze(report)
    r = report.roofline
    assert not r.levers and r.flops == pytest.approx(1.45e10, rel=0.05)
    assert r.fraction_of_sol < before and any("takes the lever 'Reduce before" in n for n in r.notes)


def test_statistics_already_in_the_epilogue_leave_only_a_recompute_to_fold(tmp_path):
    """#38 with the softmax's sums taken in the conv's epilogue (atomics): the normalize pass left folds in only by
    recomputing the conv, which costs more than the pass; fuse_launches promises nothing."""
    from kforge_mcp.core.problem import Source, load_problem
    from kforge_mcp.judge.roofline import reference_roofline, with_measured

    report = ProfileReport.model_validate(json.loads((DATA / "convtranspose3d-softmax-fma-h100.json").read_text()))
    name = "convtranspose3d_avgpool_clamp_softmax_multiply_l2.py"
    problem = load_problem(Source((DATA.parent.parent / "problems" / name).read_text(), name), tmp_path)
    report.roofline = with_measured(reference_roofline(problem, "cpu", report.device_name, atol=1e-4, rtol=1e-4), 7.66)
    conv = max(report.device_kernels(), key=lambda k: k.device_ms)
    conv.atomic_instructions = 4.2e6
    a = agent.analyze(report)
    assert "fuse_launches" not in [r.rule for r in a.recommendations]
    fuse = next(r for r in a.no_gain if r.rule == "fuse_launches")
    assert "recomputing the conv" in fuse.gain_basis


def _recorded(profile: str) -> ProfileReport:
    """A later step as the H100 profiled it, with the roofline its verify measured (paths on the problem's inputs)."""
    return ProfileReport.model_validate(json.loads((DATA / profile).read_text()))


def test_a_kernel_that_splits_in_its_loop_is_told_to_split_once_not_to_add_tma():
    """#46 as a bf16x3 conv already fed by TMA and walked by tap, splitting its input tile per K step: the conversion
    pipe 32% busy against a tensor pipe of 26%. TMA and deeper pipelines gave it 9% of 66% promised; the lever is
    the split made once (the input's parts in its re-layout pass), priced at the conversion pipe's share less that
    pass."""
    a = agent.analyze(_recorded("conv2d-subtract-split-in-loop-h100.json"))
    rules = [r.rule for r in a.recommendations]
    assert rules[0] == "split_once" and "feed_tensor_pipe" not in rules, rules
    top = a.recommendations[0]
    assert "bf16x3" in top.title and "re-layout" in top.action and "TensorDescriptor" in top.action
    busy = {e.metric: e.value for e in top.evidence}
    assert busy["conversion pipe busy"] == "32.4%" and busy["tensor pipe busy"] == "25.8%"
    # 0.87 of the time x 32% busy, less one pass over the 537 MB input (0.32 ms of 4.31)
    assert 0.15 < top.expected_gain < 0.28 and "one pass over the input" in top.gain_basis


def test_a_kernel_that_split_once_is_not_told_to_again():
    """#61 whose re-layout pass writes the input's bf16 parts: its conv kernel's conversion pipe is idle and its
    tensor pipe 65% busy; the split pass itself (conversions, no MMA) is not a tensor-core kernel."""
    report = _recorded("convtranspose3d-relu-groupnorm-split-once-h100.json")
    rules = [r.rule for r in agent.analyze(report).recommendations]
    assert "split_once" not in rules and "feed_tensor_pipe" in rules, rules


def test_a_single_term_path_has_nothing_to_split():
    report = _recorded("conv2d-subtract-split-in-loop-h100.json")
    report.roofline.path = "bf16"
    assert "split_once" not in [r.rule for r in agent.analyze(report).recommendations]


def test_a_gemm_that_splits_in_its_loop_before_tma_is_fed_and_split_in_one_change():
    """A bf16x3 GEMM step (the H200 trajectories: conversion pipe 46% busy, tensor pipe 35%, no TMA) stays
    feed_tensor_pipe's, whose action adds the split made once: the next step did both and reached 93-97%."""
    record = DATA.parent / "advice-trajectories" / "h200.json"
    rec = json.loads(record.read_text())["problems"]["gemm_multiply_leakyrelu_l2"][1]
    assert rec["candidate"] == "step1_bf16x3.py"
    a = agent.analyze(ProfileReport.model_validate(rec["profile_report"]))
    top = a.recommendations[0]
    assert top.rule == "feed_tensor_pipe" and "split them once outside it" in top.action
    assert "split_once" not in [r.rule for r in a.recommendations]


def test_feeding_a_convolutions_tensor_pipe_is_priced_as_measured_on_convolutions():
    """#61's step 3 (tensor pipe 65%, operands split once): its GEMM-calibrated promise was 21%, and taking TMA with
    256x128 tiles made it 30% slower. On a convolution the promise is scaled by what such changes realized on the
    H100 conv trajectories, low priority, with the range said."""
    a = agent.analyze(_recorded("convtranspose3d-relu-groupnorm-split-once-h100.json"))
    feed = next(r for r in a.recommendations if r.rule == "feed_tensor_pipe")
    assert feed.priority == "low" and feed.expected_gain < 0.05
    assert "Uncertain on a convolution" in feed.action and "x 0.15 (a convolution" in feed.gain_basis
    # what the conv steps measured: two programs per SM overlap epilogues; 256-row tiles at one per SM lost
    assert "two programs per SM" in feed.action and "128x256" not in feed.action


def test_a_conv_kernel_fed_as_advised_is_not_told_again():
    """#23's fourth step takes its operands by TMA and runs a persistent grid of two programs of 4 warps per SM
    (both resident: 11.9% occupancy of 64 warps). Once its MMAs are known to overlap too, it has made every change
    the feeding advice asks of a convolution: the advice is set apart at no gain, saying so, and not ranked. Take
    any part away and it is advised again. (Its 3 input channels are taken as 64 here: with 3 the advice is set
    apart for those, as the next test shows.)"""

    def advice(**change) -> tuple[list[str], list]:
        report = _recorded("conv3d-groupnorm-tma-h100.json")
        for c in report.roofline.convs:
            c.c_in = 64
        conv = next(k for k in report.kernels if k.name == "conv3d_stats_kernel")
        for key, value in change.items():
            if key == "achieved_occupancy_pct":
                conv.achieved_occupancy_pct = value
            else:
                conv.metrics[key] = value
        a = agent.analyze(report)
        return [r.rule for r in a.recommendations], a.no_gain

    ranked, _ = advice()  # whether its MMAs overlap is not known: the advice stands
    assert "feed_tensor_pipe" in ranked
    ranked, no_gain = advice(wgmma_serialized=0.0)
    assert "feed_tensor_pipe" not in ranked
    done = next(r for r in no_gain if r.rule == "feed_tensor_pipe")
    assert done.title.endswith("done already") and done.expected_gain == 0 and "conv3d_stats_kernel" in done.action
    for part in ({"blocks_per_sm": 1.0}, {"achieved_occupancy_pct": 6.1}, {"wgmma_serialized": 1.0}):
        ranked, no_gain = advice(**({"wgmma_serialized": 0.0} | part))
        assert "done already" not in [r.title.split(": ")[-1] for r in no_gain], part
        assert "feed_tensor_pipe" in ranked or "mma_serialized" in ranked, part


def test_a_conv_with_fewer_input_channels_than_an_mma_step_is_not_told_to_feed_its_tensor_pipe():
    """#23 (Conv3d, 3 input channels, 27 taps): each tap gives 3 channels, fewer than the smallest K of an MMA step the
    H100's table holds (4, TF32's mma.sync), so its tensor pipe idles for padding and gathers. On the H100 conv trajectories its TMA persistent step ran 14% slower and its two
    accumulators 9% slower, where the pipe's idle share promised 10%. The advice is set apart at no gain, saying
    why and what may pay instead; with 4 channels a tap it is advised again."""

    def advice(c_in: int):
        report = _recorded("conv3d-groupnorm-tma-h100.json")
        for c in report.roofline.convs:
            c.c_in = c_in
        a = agent.analyze(report)
        return [r.rule for r in a.recommendations], a.no_gain

    ranked, no_gain = advice(3)
    assert "feed_tensor_pipe" not in ranked
    padded = next(r for r in no_gain if r.rule == "feed_tensor_pipe")
    assert (
        padded.expected_gain == 0
        and "3 input channel(s)" in padded.action
        and "input_precision='ieee'" in (padded.action)
    )
    assert {"input channels per tap": 3}.items() <= {e.metric: e.value for e in padded.evidence}.items()
    ranked, no_gain = advice(4)
    assert "feed_tensor_pipe" in ranked and not any(r.title.endswith("input channels") for r in no_gain)


def test_a_few_stray_loads_are_not_told_to_coalesce():
    """#23's fourth step loads its tiles by TMA (which the sector counters leave out); its only plain loads are the
    bias, read in the accumulator's column layout: half of 6,336 sectors wasted, 200 KB in a 0.66 ms kernel. The
    step that coalesced them realized 1% where 12% was promised."""
    a = agent.analyze(_recorded("conv3d-groupnorm-tma-h100.json"))
    assert "uncoalesced_access" not in [r.rule for r in [*a.recommendations, *a.no_gain]]


def test_an_epilogue_of_special_functions_is_not_taken_for_the_split(tmp_path):
    """#16's fourth step keeps its conversion pipe 29% busy, but its mish epilogue (4 special functions on each of
    537M outputs) keeps it about 16% busy on its own: the split's share is the rest, and making the parts once is a
    low-priority change (the step that did realized -11%; the same change on #46, whose tanh epilogue is 3% of that
    pipe, realized 44%)."""
    from kforge_mcp.core.problem import Source, load_problem
    from kforge_mcp.judge.roofline import count_problem

    name = "convtranspose2d_mish_add_hardtanh_scaling_l2.py"
    problem = load_problem(Source((DATA.parent.parent / "problems" / name).read_text(), name), tmp_path)
    report = _recorded("convtranspose2d-mish-split-in-loop-h100.json")
    report.roofline.special_functions = count_problem(problem).special_functions
    assert report.roofline.special_functions == 4 * 128 * 64 * 256 * 256  # mish, on every output
    a = agent.analyze(report)
    split = next(r for r in [*a.recommendations, *a.no_gain] if r.rule == "split_once")
    busy = {e.metric: e.value for e in split.evidence}
    assert busy["conversion pipe busy"] == "28.7%"
    assert 14 < float(busy["of it, the epilogue's special functions (at the pipe's rate)"].rstrip("%")) < 18
    assert split.priority == "low" and split.expected_gain < 0.05


def test_a_short_convolution_that_adds_its_sums_every_tile_keeps_them_in_registers():
    """#23's sixth step as an H200 profiled it: a persistent 3xtf32 conv of 81 multiply-adds an output pixel whose
    epilogue sums every tile over its rows and adds the sums with atomics (160 atomic instructions a program), its
    warps 19% of their cycles at barriers, 162 registers a thread. The advice keeps the sums in registers over a run
    of tiles, priced at that barrier share (the next step realized 20% there). Moving the conv off the tensor cores
    (direct_conv) ranks above it: it takes the tile sums' share too."""
    a = agent.analyze(_recorded("conv3d-groupnorm-sums-every-tile-h200.json"))
    assert [r.rule for r in a.recommendations[:2]] == ["direct_conv", "tile_sums"]
    top = a.recommendations[1]
    assert top.kernels == ["conv3d_stats_kernel"]
    found = {e.metric: e.value for e in top.evidence}
    assert found["atomic instructions a program"] == pytest.approx(160.0)
    assert found["warp cycles waiting at barriers"] == "19.4%" and found["registers a thread"] == 162
    assert 0.15 < top.expected_gain < 0.25 and "s_acc += v" in top.action and "K = 81" in top.action


def test_a_deep_convolution_a_full_register_file_or_one_add_a_run_is_not_told_to_keep_its_sums():
    """The same kernel with 64 input channels (1728 multiply-adds an output pixel: on an H200 a 1728-deep kernel lost
    6% to the change), with no registers left for the sums (its TMA step at 247: 23's kernel with 64 output channels,
    at 250, lost 18-22%), or adding its sums twice a program: no tile_sums."""

    def rules(report) -> list[str]:
        return [r.rule for r in agent.analyze(report).recommendations]

    deep = _recorded("conv3d-groupnorm-sums-every-tile-h200.json")
    for c in deep.roofline.convs:
        c.c_in = 64
    assert "tile_sums" not in rules(deep)
    full = _recorded("conv3d-groupnorm-tma-h100.json")
    assert next(k.registers for k in full.kernels if k.name == "conv3d_stats_kernel") == 247
    assert "tile_sums" not in rules(full)
    once = _recorded("conv3d-groupnorm-sums-every-tile-h200.json")
    conv = next(k for k in once.kernels if k.name == "conv3d_stats_kernel")
    conv.atomic_instructions = 2.0 * conv.blocks
    assert "tile_sums" not in rules(once)


def test_a_small_convolution_on_the_tensor_cores_is_told_to_run_directly_on_the_fma_units():
    """#23's seventh step as an H200 profiled it: a persistent 3xtf32 conv of 81 multiply-adds an output pixel into
    24 channels at 0.547 ms, 11% of 3xTF32's peak. A direct FMA conv of its 9.85 GFLOP at 40% of the FMA peak would
    take 0.368 ms: the advice moves it off the tensor cores (the next step realized 33%), and the tensor cores' own
    advice on the FMA kernel that followed (0.358 ms) prices the tensor cores at what this conv reached on them, so
    it does not send it back."""
    a = agent.analyze(_recorded("conv3d-groupnorm-sums-in-registers-h200.json"))
    top = a.recommendations[0]
    assert top.rule == "direct_conv" and top.kernels == ["conv3d_stats_kernel"]
    found = {e.metric: e.value for e in top.evidence}
    assert found["multiply-adds an output pixel takes (C_in x taps met)"] == 81
    assert found["output channels a group"] == 24 and found["direct FMA estimate"] == "0.3677 ms"
    assert 0.25 < top.expected_gain < 0.32 and "tl.static_range" in top.action
    after = agent.analyze(_recorded("conv3d-groupnorm-fma-direct-h200.json"))
    advised = [r.rule for r in after.recommendations]
    assert "direct_conv" not in advised and "use_tensor_cores" not in advised
    back = next(r for r in after.no_gain if r.rule == "use_tensor_cores")
    assert "11% of 3xTF32's peak whatever its path" in back.gain_basis


def test_a_direct_convolutions_shifted_tap_windows_are_not_told_to_coalesce():
    """23's and 24's direct FMA convs on an H200: their loads use 23 of a sector's 32 bytes at 2.6 sectors a
    request, each warp one run of consecutive voxels that its tap shifts off a sector boundary. The lanes are in
    order already: the step that put them on 32 consecutive voxels gained -4% where uncoalesced_access promised
    20%. The same useful bytes at 16 sectors a request (a gather) still count as waste."""
    from kforge_mcp.advice.rules.memory import wasted_fraction

    def rules(report) -> list[str]:
        a = agent.analyze(report)
        return [r.rule for r in a.recommendations + a.no_gain]

    for name in ("conv3d-groupnorm-fma-direct-h200.json", "conv3d-min-softmax-fma-direct-h200.json"):
        report = _recorded(name)
        conv = max(report.device_kernels(), key=lambda k: k.device_ms)
        assert conv.global_load_bytes_per_sector < 24 and conv.global_load_sectors_per_request < 3
        assert wasted_fraction(conv, NVIDIA) < 0.2 and "uncoalesced_access" not in rules(report)
    gather = _recorded("conv3d-groupnorm-fma-direct-h200.json")
    conv = max(gather.device_kernels(), key=lambda k: k.device_ms)
    conv.global_load_sectors_per_request = 16.0
    assert wasted_fraction(conv, NVIDIA) > 0.2 and "uncoalesced_access" in rules(gather)


def test_the_direct_convolutions_tap_loops_follow_the_convolution():
    """A 2d convolution loops over (channel, kh); a strided transposed one is told to take its outputs a phase at a
    time, each with only the taps that meet it (a plain loop over every tap masks most of them away)."""
    report = _recorded("conv3d-groupnorm-sums-in-registers-h200.json")

    def action(**changes) -> str:
        r = report.model_copy(deep=True)
        for c in r.roofline.convs:
            for name, value in changes.items():
                setattr(c, name, value)
        return next(x for x in agent.analyze(r).recommendations if x.rule == "direct_conv").action

    plain = action()
    assert "Loop over (channel, kd, kh)" in plain and "phase" not in plain
    assert "Loop over (channel, kh) with range() and unroll only kw" in action(kernel=[3, 3])
    transposed = action(transposed=True, stride=[2, 2, 2])
    assert "transposed with stride 2" in transposed and "(p + padding) // stride - t" in transposed


def test_a_direct_convolution_slow_for_its_stores_is_not_told_to_go_direct_again():
    """50_ConvTranspose3d_Scaling_AvgPool_BiasAdd_Scaling on an H200, held out from the rule: its plain fp32 kernel
    (tl.dot on the FMA units, 2.4 shared-memory wavefronts a warp's multiply-add) is told to go direct; the direct
    kernel that followed (a phase a program, 0.2 wavefronts, 2% of the FMA peak) is slow for its stores, 6 useful
    bytes a sector as each phase writes every other output: the stores are the advice, not direct_conv again."""
    gemm = agent.analyze(_recorded("convtranspose3d-scaling-avgpool-gemm-fma-h200.json"))
    assert (
        gemm.recommendations[0].rule == "direct_conv" and "transposed with stride 2" in gemm.recommendations[0].action
    )
    direct = agent.analyze(_recorded("convtranspose3d-scaling-avgpool-direct-phases-h200.json"))
    rules = [r.rule for r in direct.recommendations]
    assert "direct_conv" not in rules + [r.rule for r in direct.no_gain]
    assert rules[0] == "uncoalesced_access" and direct.recommendations[0].expected_gain > 0.5


def test_coalescing_promises_no_more_than_streaming_the_bytes_used_at_drams_ceiling():
    """50's average pool (an H200): its window reads use 4 of a sector's 32 bytes, but L1/L2 serve the rest, its DRAM
    bytes within 1% of the bytes it uses: coalesced, it still streams those. Its rewrite gained 5% on that kernel; the
    wasted fraction alone promised 86%."""
    report = _recorded("convtranspose3d-scaling-avgpool-direct-phases-h200.json")
    report.kernels = [k for k in report.kernels if k.name == "avgpool_bias_scale_kernel"]
    pool = report.kernels[0]
    assert pool.global_load_bytes_per_sector == 4.0
    a = agent.analyze(report)
    coalesce = next(r for r in [*a.recommendations, *a.no_gain] if r.rule == "uncoalesced_access")
    assert coalesce.expected_gain < 0.12


def test_an_element_wise_kernel_busy_issuing_is_not_told_to_become_an_implicit_gemm():
    """79_Conv3d_Multiply_InstanceNorm_Clamp_Multiply_Max on an H200: its normalizing kernel (normalize, clamp,
    multiply, the max over 16 channels) issues 80% of cycles with its FMA pipe 34% busy. The advice cuts its
    instructions an element, not a GEMM's products, and promises no more than streaming its bytes at DRAM's ceiling
    allows."""
    report = _recorded("conv3d-instancenorm-max-stats-in-epilogue-h200.json")
    a = agent.analyze(report)
    issue = next(r for r in [*a.recommendations, *a.no_gain] if r.rule == "issue_bound")
    assert issue.kernels == ["norm_clamp_mul_max_kernel"]
    assert "implicit GEMM" not in issue.action and "instructions an element" in issue.action
    norm = next(k for k in report.kernels if k.name == "norm_clamp_mul_max_kernel")
    share = norm.device_ms / sum(k.device_ms for k in report.device_kernels())
    floor_ms = (norm.dram_bytes_read + norm.dram_bytes_write) / (report.roofline.peak_bandwidth * 0.85) * 1e3
    assert issue.expected_gain <= share * (1 - floor_ms / norm.mean_ms) + 1e-3


def test_a_latency_bound_pass_with_enough_warps_is_told_to_put_bytes_in_flight_not_to_shed_registers():
    """21's GroupNorm pass on an H200: 35% achieved occupancy, registers capping it at 37.5%. Told that registers
    cap occupancy, its next step halved them and doubled the occupancy, and gained 2.5%: with a third of the SM's
    warps resident the lever is bytes in flight per thread."""
    a = agent.analyze(_recorded("conv2d-groupnorm-pass-registers-h200.json"))
    latency = next(r for r in a.recommendations if r.rule == "latency_bound")
    assert latency.kernels == ["groupnorm_apply_kernel"]
    assert "bytes in flight per thread" in latency.action and "Registers cap occupancy" not in latency.action


def test_a_deep_or_wide_convolution_stays_on_the_tensor_cores():
    """The same kernel with 64 input channels (1728 multiply-adds a pixel) or 64 output channels (on an H200, 23's
    problem with 64 output channels: the rule does not fire, bench/results/direct-conv/h200-held-out.md): no
    direct_conv. With 64 input channels the FLOPs grow too: a direct FMA conv would take longer than the kernel."""

    def rules(report) -> list[str]:
        a = agent.analyze(report)
        return [r.rule for r in a.recommendations + a.no_gain]

    deep = _recorded("conv3d-groupnorm-sums-in-registers-h200.json")
    for c in deep.roofline.convs:
        c.c_in = 64
    assert "direct_conv" not in rules(deep)
    wide = _recorded("conv3d-groupnorm-sums-in-registers-h200.json")
    for c in wide.roofline.convs:
        c.c_out = 64
    assert "direct_conv" not in rules(wide)
    slow_fma = _recorded("conv3d-groupnorm-sums-in-registers-h200.json")
    slow_fma.roofline.measured_ms = 0.3
    for k in slow_fma.kernels:
        k.device_ms *= 0.3 / 0.5755
    assert "direct_conv" not in rules(slow_fma)


def test_a_small_convolution_is_priced_on_the_tensor_cores_at_the_rate_measured_whatever_its_path():
    """24_Conv3d_Min_Softmax's direct FMA kernel on an H200 (0.347 ms profiled, 41% of the FMA peak): fp16 passes the
    problem, and 11% of fp16's peak would put a tensor-core kernel at 0.09 ms (use_tensor_cores said 74%). The one small-conv
    tensor-core kernel measured ran at 11% of 3xTF32's peak, its time in shaping operands: priced at that rate, the
    tensor cores promise nothing over this kernel."""
    report = _recorded("conv3d-min-softmax-fma-direct-h200.json")
    assert report.roofline.path == "fp16"
    a = agent.analyze(report)
    assert "use_tensor_cores" not in [r.rule for r in a.recommendations]
    back = next(r for r in a.no_gain if r.rule == "use_tensor_cores")
    assert "3xtf32 peak x 0.11" in back.gain_basis


def test_a_small_convolution_on_the_fma_units_far_from_a_direct_ones_rate_is_told_to_compute_it_directly():
    """#23's plain fp32 kernel as an H100 profiled it (its conv 2.227 ms on the FMA units, 7% of their peak): a direct
    convolution of its 9.85 GFLOP at 40% of the FMA peak takes 0.368 ms, the tensor cores at the rate a small
    convolution reached on them 0.54 ms. The advice goes to the direct kernel first, the implicit GEMM after it."""
    a = agent.analyze(_recorded("conv3d-groupnorm-fp32-h100.json"))
    assert [r.rule for r in a.recommendations[:2]] == ["direct_conv", "use_tensor_cores"]
    top = a.recommendations[0]
    assert top.kernels == ["conv3d_kernel"] and "at 7% of their peak" in top.action
    assert 0.55 < top.expected_gain < 0.7 and top.expected_gain > a.recommendations[1].expected_gain
