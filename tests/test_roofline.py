"""The roofline's own model: a convolution priced as the implicit GEMM a tensor-core kernel runs (its N and K padded
to the MMA's shapes, the form that pads least), a GEMM's bound as it was, and a kernel that takes a lever of the
reference's structure judged against the lever's bound. Counting runs on the meta device: no reference runs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kforge_mcp.core.problem import Source, load_problem
from kforge_mcp.core.schemas import VerifyReport
from kforge_mcp.core.settings import Settings
from kforge_mcp.engine.verify import bound_from_paths
from kforge_mcp.judge.roofline import conv_gemm, count_problem, make_roofline, reference_roofline, with_measured
from kforge_mcp.judge.structure import reference_levers

ROOT = Path(__file__).resolve().parents[1]
H200 = "NVIDIA H200"
BF16_PEAK = 989.5e12

CONV2D_BF16 = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3).to(torch.bfloat16)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(8, 3, 64, 64, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
"""

DEPTHWISE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 64, 3, padding=1, groups=64)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(8, 64, 128, 128)]


def get_init_inputs():
    return []
"""


def load(tmp_path, text: str | None = None, path: Path | None = None):
    if path is not None:
        text = path.read_text()
    assert text is not None
    return load_problem(Source(text, path.name if path else "problem.py"), tmp_path)


def convs_of(tmp_path, text: str):
    return list(count_problem(load(tmp_path, text)).convs)


def test_a_transposed_convolution_problem_names_its_kind_and_implicit_gemm(tmp_path):
    problem = load(tmp_path, path=ROOT / "tests/problems/convtranspose3d_softmax_sigmoid_l2.py")
    r = reference_roofline(problem, "cpu", H200, atol=1e-2, rtol=1e-2)
    (c,) = r.convs
    flops = 2 * 16 * (16 * 32 * 32) * 32 * 64 * 27  # every input pixel times every tap: FlopCounterMode's count
    assert r.kind == "convolution (transposed 3d)" and r.flops_by_op == {"convolution": flops} == {
        "convolution": r.flops
    }
    assert (c.op, c.in_spatial, c.out_spatial, c.stride) == ("conv_transpose3d", [16, 32, 32], [32, 64, 64], [2] * 3)
    # the scatter form (a row per input pixel): its FLOPs are the counted ones, no stride phases; K = 32 pads nothing
    assert (c.form, c.m, c.n, c.k, c.phases) == ("scatter", 16 * 16 * 32 * 32, 64 * 27, 32, 1)
    assert c.padded_flops == r.compute_flops == flops
    out_bytes = 16 * 64 * 32 * 64 * 64 * 4
    assert r.out_bytes == out_bytes and r.bound == "memory"  # fp16 at 1e-2: the math is 4x under the write
    assert r.bound_reason.startswith("memory-bound: the floor is the 537 MB output write")
    assert "scatter implicit GEMM M=262144 N=1728 K=32" in r.bound_reason
    # at fp32's 1e-4, judged by rounding alone, 3xTF32 is the fastest path: compute-bound, and said so
    strict = reference_roofline(problem, "cpu", H200)
    assert strict.path == "3xtf32" and strict.bound == "compute" and strict.bound_reason.startswith("compute-bound")
    assert strict.sol_ms == pytest.approx(flops / (494.5e12 / 3) * 1e3)


def test_a_direct_conv_whose_k_is_not_a_multiple_of_the_mma_k_pays_its_padding(tmp_path):
    r = reference_roofline(load(tmp_path, CONV2D_BF16), "cpu", H200)
    (c,) = r.convs
    assert r.path == "bf16" and r.kind == "convolution (2d)"
    assert (c.form, c.m, c.n, c.k) == ("gather", 8 * 62 * 62, 16, 3 * 3 * 3)
    # K = 27 pads to 32 (the smallest bf16 MMA K is 8: mma.sync m16n8k8); N = 16 is whole
    assert r.flops == 2 * 8 * 62 * 62 * 16 * 27 and c.padded_flops == pytest.approx(r.flops * 32 / 27)
    assert r.compute_flops == pytest.approx(r.flops * 32 / 27)
    assert r.flop_ms == pytest.approx(r.flops * 32 / 27 / BF16_PEAK * 1e3) and r.flop_ms > r.flops / BF16_PEAK * 1e3
    assert "padded to" in r.bound_reason
    # a device whose bf16 rate is its FMA rate has no MMA to pad for
    assert reference_roofline(load(tmp_path, CONV2D_BF16), "cpu", "Apple M2").compute_flops == r.flops


def test_the_implicit_gemm_takes_the_form_that_pads_least(tmp_path):
    few_out = CONV2D_BF16.replace("nn.Conv2d(3, 16, 3)", "nn.Conv2d(16, 3, 3)").replace("8, 3, 64", "8, 16, 64")
    (c,) = convs_of(tmp_path, few_out)
    # gather: N = 3 pads to 8 (x2.67); scatter: K = 16 whole, N = 3 x 9 = 27 pads to 32 (x1.19)
    g = conv_gemm(c, 8, 8)
    assert (g.form, g.n, g.k) == ("scatter", 27, 16) and g.padded_flops == pytest.approx(c.flops * 32 / 27)
    thin = CONV2D_BF16.replace("nn.Conv2d(3, 16, 3)", "nn.ConvTranspose2d(4, 16, 3, stride=2, padding=1)")
    (t,) = convs_of(tmp_path, thin.replace("8, 3, 64", "8, 4, 64"))
    # scatter pads K = 4 to 8 (x2); the gather over the output splits into 4 stride phases of 1, 2, 2 and 4 taps,
    # K = 4, 8, 8, 16, which pad to 8, 8, 8, 16 (x40/36)
    g = conv_gemm(t, 8, 8)
    assert (g.form, g.phases, g.k, g.n) == ("gather", 4, 16, 16)
    assert g.padded_flops == pytest.approx(t.flops * 40 / 36, rel=0.02)
    assert conv_gemm(t).padded_flops == t.flops  # the FMA pipe pads nothing


def test_a_depthwise_conv_is_bound_on_the_fma_pipe_when_padding_costs_more(tmp_path):
    """N = 1 and K = 9 per group: a tensor-core path pays 8 x 12/9 its FLOPs on 3xTF32, slower than fp32 FMA."""
    r = reference_roofline(load(tmp_path, DEPTHWISE), "cpu", H200)
    assert r.path == "fp32" and r.compute_flops == r.flops and "MMA padding" in r.path_reason


def test_a_plain_gemm_roofline_is_unchanged(tmp_path):
    problem = load(tmp_path, path=ROOT / "tests/problems/matmul_small.py")
    r = reference_roofline(problem, "cpu", H200)
    flops, nbytes = 2 * 128 * 512 * 192, 4 * (128 * 512 + 512 * 192 + 128 * 192)
    assert (r.flops, r.bytes, r.kind, r.convs, r.compute_flops) == (flops, nbytes, "matmul", [], flops)
    plain = make_roofline(flops, nbytes, "fp32", H200)
    assert (r.path, r.sol_ms, r.flop_ms, r.byte_ms) == (plain.path, plain.sol_ms, plain.flop_ms, plain.byte_ms)
    assert r.flop_ms == pytest.approx(flops / r.peak_flops * 1e3)


# ---- a kernel that takes a lever of the reference's structure ----

FOLD = ROOT / "tests/problems/matmul_divide_sum.py"  # KernelBench 14_Gemm_Divide_Sum_Scaling, scaled down


def test_a_kernel_that_folds_the_sum_is_judged_against_the_levers_bound(tmp_path):
    problem = load(tmp_path, path=FOLD)
    roof = reference_levers(problem, "cpu", reference_roofline(problem, "cpu", H200))
    fold = next(lv for lv in roof.levers if lv.kind == "fold_reduction")
    assert fold.sol_ms_after < roof.byte_ms <= roof.sol_ms
    ms = (fold.sol_ms_after + roof.byte_ms) / 2  # under the reference's memory floor, over the folded bound
    r = with_measured(roof, ms)
    assert r.below_bound and r.corrected_sol_ms == fold.sol_ms_after
    assert r.correction.startswith(f"the kernel takes the lever '{fold.title}'")
    assert f"bound taken as the lever's {fold.sol_ms_after:.4g} ms" in r.correction
    assert 0 < r.fraction_of_sol == pytest.approx(fold.sol_ms_after / ms)
    # under the lever's bound too: the memory floor and the output write stay the last steps
    assert "output write" in with_measured(roof, fold.sol_ms_after / 2).correction


def timed(ms: float) -> dict:
    stats = {"median_ms": ms, "mean_ms": ms, "min_ms": ms, "max_ms": ms, "iqr_ms": 0.0, "spread": 0.0}
    return {"candidate": {**stats, "samples": 10, "clock": "device events"}}


def test_verify_and_analyze_carry_the_levers_to_the_bound(engine):
    """The levers come with the paths' measurement (one worker job), so a device verify's bound and an analysis
    with the problem see them (the verify report is built here: no GPU)."""
    src = Source(FOLD.read_text(), FOLD.name)
    roof = engine.roofline(str(FOLD), device_name=H200)
    fold = next(lv for lv in roof.levers if lv.kind == "fold_reduction")
    ms = (fold.sol_ms_after + roof.byte_ms) / 2
    report = VerifyReport(verdict="pass", timing=timed(ms), device_state={"name": H200}, sol_ms=roof.sol_ms)
    bound_from_paths(report, engine.paths.soon(src, (None, None, None), 120), time.perf_counter() + 120)
    assert report.sol_ms == pytest.approx(fold.sol_ms_after) and "the kernel takes the lever" in report.sol_path
    assert [f.code for f in report.findings] == ["below_speed_of_light_model"]
    profile = {"source": "ncu", "device_name": H200, "device_ms_per_forward": ms, "forwards": 1}
    analysis = engine.analyze_profile(profile=profile, problem=str(FOLD))
    assert analysis.roofline.below_bound and "the kernel takes the lever" in analysis.roofline.correction


def test_verifys_own_bound_takes_the_levers_and_flags_no_honest_fold(tmp_path):
    """The worker's speed-of-light check (run on the GPU after timing; called here with a device's name): a time
    under the reference's floor but over the folded one is a lever taken, not a time faster than light."""
    from kforge_mcp.core.requests import VerifyRequest
    from kforge_mcp.judge.baselines import BaselineCache
    from kforge_mcp.judge.verify import Verifier

    src = Source(FOLD.read_text(), FOLD.name)
    req = VerifyRequest(problem=src, candidate=src, target="triton", device="cpu", trials=1)

    def check(ms: float):
        v = Verifier(req, lambda *a, **k: None, tmp_path, BaselineCache(), Settings.read().worker_memory_mb)
        v.load_problem()
        v.report.device_state = {"name": H200}
        v.speed_of_light(ms)
        return v.report

    roof = reference_roofline(load(tmp_path, path=FOLD), "cpu", H200)
    folded = check(roof.byte_ms / 2)  # the fold reads a [1 x 64] weight, not the [96 x 64] one
    assert [f.code for f in folded.findings] == ["below_speed_of_light_model"] and "takes the lever" in folded.sol_path
    assert "faster_than_light" in [f.code for f in check(roof.byte_ms / 100).findings]  # under any lever: a bug


def test_a_worker_computes_the_references_bound_once_and_each_verify_gets_its_own_time(tmp_path, monkeypatch):
    """The reference's roofline and levers are kept per problem, shapes and device in the worker's cache: the
    second verify of a problem counts nothing again, and its bound is the one a fresh worker would give."""
    import kforge_mcp.judge.roofline as roofline
    import kforge_mcp.judge.structure as structure
    from kforge_mcp.core.requests import VerifyRequest
    from kforge_mcp.judge.baselines import BaselineCache
    from kforge_mcp.judge.verify import Verifier

    src = Source(FOLD.read_text(), FOLD.name)
    req = VerifyRequest(problem=src, candidate=src, target="triton", device="cpu", trials=1)
    calls = {"roofline": 0, "levers": 0}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(roofline, "reference_roofline", counted("roofline", reference_roofline))
    monkeypatch.setattr(structure, "reference_levers", counted("levers", reference_levers))

    def check(ms: float, cache: BaselineCache):
        v = Verifier(req, lambda *a, **k: None, tmp_path, cache, Settings.read().worker_memory_mb)
        v.load_problem()
        v.report.device_state = {"name": H200}
        v.speed_of_light(ms)
        return v.report

    roof = reference_roofline(load(tmp_path, path=FOLD), "cpu", H200)
    kept = BaselineCache()
    slow, folded = roof.sol_ms * 2, roof.byte_ms / 2
    first, second = check(slow, kept), check(folded, kept)
    assert calls == {"roofline": 1, "levers": 1}  # the levers only for the time under the bound
    for ms, report in ((slow, first), (folded, second)):
        fresh = check(ms, BaselineCache())
        assert (report.sol_ms, report.fraction_of_sol, report.sol_path) == (
            fresh.sol_ms,
            fresh.fraction_of_sol,
            fresh.sol_path,
        )
        assert [f.model_dump() for f in report.findings] == [f.model_dump() for f in fresh.findings]
    assert first.fraction_of_sol == pytest.approx(0.5) and "takes the lever" in second.sol_path


HUGE_INPUT = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 64, 3)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.rand(4096, 64, 256, 256)]  # 64 GiB: more than this box holds


def get_init_inputs():
    return []
"""


def test_counting_draws_no_input_value(tmp_path):
    # a host draw of this input would need 64 GiB; the counts come from shapes alone
    counts = count_problem(load(tmp_path, HUGE_INPUT))
    assert counts.flops == pytest.approx(2 * 4096 * 64 * 254 * 254 * 64 * 9, rel=1e-3)
    assert counts.convs[0].batch == 4096


def test_counting_a_get_inputs_that_meta_cannot_run_draws_it_on_the_host(tmp_path):
    text = HUGE_INPUT.replace(
        "    return [torch.rand(4096, 64, 256, 256)]  # 64 GiB: more than this box holds",
        "    import numpy as np\n    return [torch.from_numpy(np.random.rand(2, 64, 16, 16).astype('float32'))]",
    )
    assert count_problem(load(tmp_path, text)).flops == pytest.approx(2 * 2 * 64 * 14 * 14 * 64 * 9, rel=1e-3)


DIES = """
import os
import sys

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        sys.stderr.write("the reference gave up: no such device\\n")
        sys.stderr.flush()
        os._exit(3)


def get_inputs():
    return [torch.rand(4, 4)]


def get_init_inputs():
    return []
"""


def test_a_worker_that_dies_measuring_the_paths_says_why(tmp_path):
    """The measurement's failure carries the end of the dead worker's stderr, not only its exit code."""
    from kforge_mcp.api import Engine
    from kforge_mcp.core.errors import KforgeError

    problem = tmp_path / "dies.py"
    problem.write_text(DIES)
    engine = Engine(home=tmp_path / "home")
    try:
        with pytest.raises(KforgeError) as e:
            engine.roofline(str(problem), device_name=H200, atol=1e-4, rtol=1e-4)
    finally:
        engine.close()
    assert "died during roofline" in str(e.value) and "the reference gave up: no such device" in str(e.value)
