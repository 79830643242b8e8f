"""Compute paths measured on the problem's own inputs (judge/precision_paths.py), run by a real worker:
which paths pass a tolerance, the bound they give, its ranking of timings, and the cache under the home."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from conftest import problem
from mcp import Client

from kforge_mcp.api import Engine
from kforge_mcp.core.errors import KforgeError
from kforge_mcp.core.problem import load_problem
from kforge_mcp.core.requests import RooflineRequest
from kforge_mcp.core.schemas import VerifyReport
from kforge_mcp.core.source import Source
from kforge_mcp.engine.verify import bound_from_paths
from kforge_mcp.judge.precision_paths import (
    PATH_SPECS,
    Splits,
    emulate_product,
    measure_reference,
    paths_for,
    round_to,
    sample_factor,
    split,
    varying_share,
)
from kforge_mcp.judge.roofline import count_problem, from_measured

H200 = "NVIDIA H200"
DATA = Path(__file__).resolve().parent / "data" / "profiles"

GEMM_BIAS_K4096 = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.linear(x)


def get_inputs():
    return [torch.randn(32, 4096)]


def get_init_inputs():
    return [4096, 64]
"""

CONV = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(256, 8, 3)
        self.up = nn.ConvTranspose2d(8, 4, 3)

    def forward(self, x):
        return self.up(torch.relu(self.conv(x)))


def get_inputs():
    return [torch.randn(2, 256, 8, 8)]


def get_init_inputs():
    return []
"""


# KernelBench Level 2's Conv2d + GELU + GlobalAvgPool at its published size: 4.2 GB of fp64 conv output per forward
CONV_GAP_L2 = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        x = torch.nn.functional.gelu(self.conv(x))
        return torch.nn.functional.adaptive_avg_pool2d(x, 1).squeeze(-1).squeeze(-1)


batch_size = 128
in_channels = 8
out_channels = 64
height, width = 256, 256
kernel_size = 3


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
"""

KILLS_ITS_WORKER = """
import os
import signal

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        os.kill(os.getpid(), signal.SIGKILL)


def get_inputs():
    return [torch.rand(4, 4)]


def get_init_inputs():
    return []
"""


@pytest.fixture(scope="module")
def gemm(engine):
    """The K=4096 GEMM + bias measured at KernelBench's fp32 1e-4 in a worker, twice (the second from the cache)."""
    src = Source(text=GEMM_BIAS_K4096, name="gemm_bias_k4096.py")
    first = engine.measured_paths(src, atol=1e-4, rtol=1e-4)
    return first, engine.measured_paths(src, atol=1e-4, rtol=1e-4)


def test_single_passes_fail_and_splits_pass_at_1e_4(gemm):
    m, _ = gemm
    e = m.errors
    assert m.atol == m.rtol == 1e-4 and m.products == 1 and m.flops == 2 * 32 * 4096 * 64
    assert e["bf16"] > 1 and e["tf32"] > 1 and e["fp16"] > 1 and e["fp8"] > 1  # single pass: over the tolerance
    assert e["bf16x3"] <= m.margin and e["3xtf32"] <= m.margin and e["bf16x6"] <= m.margin
    assert e["fp32"] <= m.margin
    assert e["fp32"] <= e["3xtf32"] < e["bf16x3"] < e["bf16"]  # more bits kept, less error


def test_the_bound_takes_the_fastest_passing_path_and_says_why(gemm):
    m, _ = gemm
    r = from_measured(m, H200)
    passing = [p for p in r.paths if p.max_error is not None and p.max_error <= m.margin]
    assert r.paths_measured and r.path == "bf16x3" and r.peak_flops == max(p.peak_flops for p in passing)
    assert r.peak_flops == pytest.approx(989.5e12 / 3) and r.peaks_source  # a third of the bf16 datasheet peak
    assert "bf16x3: max error" in r.path_reason and "twice 3xtf32's rate" in r.path_reason
    assert "tf32" in r.path_reason.split("miss")[1]  # the faster paths that failed, with their errors


def test_the_fraction_ranks_timings_and_never_exceeds_one(gemm):
    m, _ = gemm
    sol = from_measured(m, H200).sol_ms
    slow, fast = from_measured(m, H200, sol * 2), from_measured(m, H200, sol * 1.25)
    assert 0 < slow.fraction_of_sol < fast.fraction_of_sol <= 1
    beat = from_measured(m, H200, sol * 0.8)  # faster than bf16x3 allows: a faster path, said so
    assert beat.below_bound and 0 < beat.fraction_of_sol <= 1 and "model is wrong" in beat.notes[-1]


def test_the_second_call_reads_the_cache(gemm, engine):
    first, second = gemm
    assert second.cached and not first.cached and second.errors == first.errors
    assert second.phases == first.phases  # where the measurement's seconds went, kept with it
    assert list((engine.home / "cache" / "precision_paths").rglob("*.json"))


def test_the_measurement_says_where_its_seconds_went(gemm):
    m, _ = gemm
    assert list(m.phases)[:4] == ["count", "plan", "model", "reference"] and set(m.errors) <= set(m.phases)
    assert all(s >= 0 for s in m.phases.values())
    inside = sum(s for name, s in m.phases.items() if name != "count")  # counting comes before the measurement
    assert m.seconds - 0.2 <= inside <= m.seconds + 0.01, (m.seconds, m.phases)


def test_another_tolerance_is_measured_again(engine):
    loose = engine.measured_paths(Source(text=GEMM_BIAS_K4096, name="g.py"), atol=2e-2, rtol=2e-2)
    assert not loose.cached and loose.errors["bf16"] <= loose.margin  # bf16 passes KernelBench's 1e-2
    assert from_measured(loose, H200).path in ("bf16", "fp16", "fp8")


def test_convolutions_and_transposed_convolutions_are_emulated(tmp_path):
    src = Source(text=CONV, name="conv.py")
    problem = load_problem(src, tmp_path)
    request = RooflineRequest(problem=src, atol=1e-4, rtol=1e-4)
    m = measure_reference(problem, request, count_problem(problem, "cpu"), seeds=(1,))
    assert m.products == 2 and m.errors["bf16"] > 1 and m.errors["3xtf32"] <= m.margin


def test_a_weight_is_split_once_per_format_with_the_same_parts():
    w, x = torch.randn(64, 32), torch.randn(8, 64)
    splits = Splits([w])
    hi = splits.split(w, "bf16", 1)[0]
    three = splits.split(w, "bf16", 3)
    assert three[0] is hi and all(torch.equal(a, b) for a, b in zip(three, split(w, "bf16", 3), strict=True))
    assert splits.split(x, "bf16", 2) is not splits.split(x, "bf16", 2)  # an input is split afresh each time
    for name in ("bf16x2", "bf16x3", "fp16x2", "3xtf32", "fp32"):
        assert torch.equal(
            emulate_product(PATH_SPECS[name], torch.mm, x, w, splits), emulate_product(PATH_SPECS[name], torch.mm, x, w)
        )
    splits.drop("bf16")
    assert {k[-1] for k in splits.parts} == {"fp16", "tf32", "fp64"}


def test_a_split_is_exact_where_it_should_be():
    x = torch.randn(64, 64)
    hi, lo = split(x, "bf16", 2)
    assert torch.equal(hi, round_to(x, "bf16")) and torch.equal(lo, round_to(x - hi, "bf16"))
    assert (x - hi - lo).abs().max() <= 2.0**-16 * x.abs().max()
    a, b = torch.randn(8, 32), torch.randn(32, 8)
    got = emulate_product(PATH_SPECS["bf16x3"], torch.mm, a, b)
    (ah, al), (bh, bl) = split(a, "bf16", 2), split(b, "bf16", 2)
    assert torch.allclose(got, al @ bh + ah @ bl + ah @ bh, rtol=0, atol=1e-6)
    assert torch.equal(round_to(torch.tensor([1 + 2.0**-11]), "tf32"), torch.tensor([1 + 2.0**-10]))  # ties away


@pytest.mark.anyio
async def test_analyze_profile_with_a_problem_shows_the_measured_paths(server):
    args = {"path": str(DATA / "gemm_bias_relu-reference.ncu-raw.csv"), "problem": problem("gemm_bias_relu")}
    async with Client(server) as client:
        result = await client.call_tool("analyze_profile", args)
    assert not result.is_error, result.content
    roof = result.structured_content["roofline"]
    assert roof["paths_measured"] and all(p["max_error"] is not None for p in roof["paths"])
    assert roof["fraction_of_sol"] is not None and 0 < roof["fraction_of_sol"] <= 1
    assert "Compute path:" in result.structured_content["summary"]


def timed(ms: float) -> dict:
    return {
        "candidate": {
            "median_ms": ms,
            "mean_ms": ms,
            "min_ms": ms,
            "max_ms": ms,
            "iqr_ms": 0.0,
            "spread": 0.0,
            "samples": 10,
            "clock": "device events",
        }
    }


def test_a_device_verify_takes_its_bound_from_the_measured_paths(engine):
    """What the engine does with a GPU verify's report once the paths are measured (the report built here: no GPU)."""
    src = Source(text=GEMM_BIAS_K4096, name="gemm_bias_k4096.py")
    report = VerifyReport(verdict="pass", timing=timed(1e-3), device_state={"name": H200}, sol_ms=5e-4)
    bound_from_paths(report, engine.paths.soon(src, (None, 1e-4, 1e-4), 120), time.perf_counter() + 120)
    assert report.sol_path.startswith("bf16x3") and "max error" in report.sol_path
    assert 0 < report.fraction_of_sol <= 1 and {p.path for p in report.compute_paths} >= {"bf16x3", "3xtf32"}
    beat = VerifyReport(verdict="pass", timing=timed(1e-5), device_state={"name": H200}, sol_ms=5e-4)
    bound_from_paths(beat, engine.paths.soon(src, (None, 1e-4, 1e-4), 120), time.perf_counter() + 120)
    assert 0 < beat.fraction_of_sol <= 1 and [f.code for f in beat.findings] == ["below_speed_of_light_model"]


def test_profile_with_a_problem_shows_the_measured_paths(engine):
    r = engine.profile(problem("gemm_bias_relu"), target="triton", device="cpu", iterations=1).roofline
    assert r.paths_measured and r.atol == 1e-4 and any(p.max_error is not None for p in r.paths)
    assert r.fraction_of_sol is not None and 0 < r.fraction_of_sol <= 1


def test_calls_for_one_problem_share_one_measurement(engine):
    src = Source(text=GEMM_BIAS_K4096.replace("64]", "48]"), name="g48.py")
    futures = [engine.paths.soon(src, (None, 1e-4, 1e-4), 120) for _ in range(4)]
    assert all(f is futures[0] for f in futures) and futures[0].result(120).errors["bf16x3"] <= 0.5


def test_a_measurement_still_running_leaves_the_rounding_bound_and_says_so(engine):
    from concurrent.futures import Future

    report = VerifyReport(verdict="pass", timing=timed(1e-3), device_state={"name": H200}, sol_ms=5e-4)
    report.sol_path, report.fraction_of_sol = "3xtf32 (compute-bound on H200): rounding", 0.5
    bound_from_paths(report, Future(), time.perf_counter())  # nothing measured yet
    assert report.fraction_of_sol == 0.5 and report.sol_path.startswith("3xtf32")
    assert "still being measured" in report.sol_path


def test_verifies_sharing_a_running_measurement_wait_for_it_once_in_all(tmp_path):
    """An edit loop while a slow measurement runs: the first verify waits up to VERIFY_PATHS_WAIT_S, the next
    ones not at all; a measurement of another problem has its own wait."""
    from concurrent.futures import Future

    from kforge_mcp.engine.paths import VERIFY_PATHS_WAIT_S, ComputePaths

    paths, running, other = ComputePaths(tmp_path, executor=None), Future(), Future()
    far = time.perf_counter() + 600
    first = paths.verify_deadline(running, far) - time.perf_counter()
    assert VERIFY_PATHS_WAIT_S - 0.1 < first <= VERIFY_PATHS_WAIT_S
    assert paths.verify_deadline(running, far) <= time.perf_counter()  # nothing left to wait
    assert paths.verify_deadline(other, far) - time.perf_counter() > VERIFY_PATHS_WAIT_S - 0.1
    near = Future()  # a call with 0.5 s left waits only that, and leaves the rest to the next
    assert paths.verify_deadline(near, time.perf_counter() + 0.5) - time.perf_counter() <= 0.5
    assert paths.verify_deadline(near, far) - time.perf_counter() > VERIFY_PATHS_WAIT_S - 0.6


@pytest.mark.slow
def test_a_large_convolution_is_measured_on_a_reduced_instance_within_the_caps(tmp_path):
    engine = Engine(home=tmp_path / "home", memory_limit_mb=4096)  # a worker over 4 GiB is killed
    try:
        m = engine.measured_paths(Source(text=CONV_GAP_L2, name="conv_gelu_gap.py"))
    finally:
        engine.close()
    assert m.peak_rss_bytes is not None and 0 < m.peak_rss_bytes <= 4 * 2**30
    assert m.reduction.sizes[0].name == "batch_size" and m.reduction.sizes[0].reduced < 128
    assert [x[1] for x in m.reduction.reduced_inputs] == [8] and m.flops == 2 * 128 * 64 * 8 * 9 * 254 * 254
    # the error of fp16 comes from the weights' rounding, the same for every sample: not scaled up by more samples
    assert m.scaled_by["fp16"] < 1.1 < m.scaled_by["fp16x2"]
    assert m.errors["fp16"] > m.margin >= m.errors["fp16x2"]
    r = from_measured(m, H200)
    assert r.path == "fp16x2" and "batch_size 128 ->" in " ".join(r.notes)


def test_a_failed_measurement_is_kept_and_not_paid_again(engine):
    src = Source(text=KILLS_ITS_WORKER, name="kills_its_worker.py")
    with pytest.raises(KforgeError, match="the worker failed") as first:
        engine.measured_paths(src)
    with pytest.raises(KforgeError, match="kept from an earlier call") as again:
        engine.measured_paths(src)
    assert str(first.value) in str(again.value)


def test_paths_left_by_the_time_budget_are_judged_by_rounding_and_said_so(tmp_path):
    src = Source(text=GEMM_BIAS_K4096, name="gemm_bias_k4096.py")
    problem = load_problem(src, tmp_path)
    request = RooflineRequest(problem=src, atol=1e-4, rtol=1e-4)
    m = measure_reference(problem, request, count_problem(problem, "cpu"), budget_s=0.0)
    assert m.errors == {} and set(m.unmeasured) == set(paths_for("fp32"))
    r = from_measured(m, H200)
    assert r.path == "3xtf32" and not r.paths_measured  # the rounding model's choice: bf16x3 needs a measurement
    assert "not measured within the 0 s budget" in r.path_reason
    assert all("not measured within" in p.why for p in r.paths)


WIDE_LINEAR = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16384, 16384)

    def forward(self, x):
        return torch.sigmoid(self.fc(x)).sum(dim=1)


def get_inputs():
    return [torch.rand(128, 16384)]


def get_init_inputs():
    return []
"""


def test_parameters_too_large_to_split_leave_every_path_to_its_rounding_without_drawing_them(engine):
    """A 16384 x 16384 weight (1 GiB) would need about 9 GiB split for every path: the measurement says so, under
    its memory cap, instead of a worker killed at the pool's 8 GiB (as KernelBench's 55, 56 and 59 were, 4 GiB)."""
    m = engine.measured_paths(Source(text=WIDE_LINEAR, name="wide_linear.py"))
    assert m.errors == {} and set(m.unmeasured) == set(paths_for("fp32")) and (m.atol, m.rtol) == (1e-4, 1e-4)
    assert all(
        "parameters hold 1 GiB" in why and "over the measurement's 4 GiB" in why for why in m.unmeasured.values()
    )
    assert m.peak_rss_bytes is not None and m.peak_rss_bytes < 2**30  # the weight was never drawn
    r = from_measured(m, H200)
    assert not r.paths_measured and r.path == "3xtf32" and "parameters hold 1 GiB" in r.path_reason


def test_more_elements_give_a_larger_max_only_where_the_error_varies():
    assert sample_factor(1000, 1000) == 1.0 and sample_factor(1000, 2000) == 1.0
    assert 1 < sample_factor(10**6, 10**4) < sample_factor(10**8, 10**4) < 2
    a = torch.randn(10_000, dtype=torch.float64)
    assert varying_share(a, a) == 0.0 and varying_share(a, 3 * a) > 0.5
    assert 0.9 < varying_share(a, torch.randn(10_000, dtype=torch.float64)) <= 1.0


def test_outputs_within_atol_leave_every_path_to_its_rounding(tmp_path):
    """The mean of a GroupNorm's output is 0 plus rounding: every path's error sits far under atol, zeros' too, so
    the measurement cannot rank paths; each is judged by its operands' rounding (fp8 is not called feasible)."""
    src = Source(text=(Path(__file__).parent / "problems" / "groupnorm_mean.py").read_text(), name="groupnorm_mean.py")
    problem = load_problem(src, tmp_path)
    m = measure_reference(problem, RooflineRequest(problem=src, atol=1e-4, rtol=1e-4), count_problem(problem, "cpu"))
    assert not m.errors and set(m.unmeasured) >= {"fp8", "fp16", "bf16x3", "3xtf32"}
    assert all("within atol" in why for why in m.unmeasured.values())
    r = from_measured(m, H200)
    assert r.path in ("3xtf32", "bf16x6") and not {p.path for p in r.paths if p.feasible} & {"fp8", "fp16", "bf16"}
    assert any("cannot tell one path from another" in n for n in r.notes)


def test_the_paths_warm_up_measures_a_tiny_problem_and_leaves_the_worker_with_the_measurements_imports(tmp_path):
    """A server's CPU worker pays the measurement's first imports before any problem is known (the flop counter's
    first use imports torch's compiler: 5-6 s on a fresh GPU machine, which a first profile waited for)."""
    import subprocess
    import sys

    code = """
import json, sys, pathlib
from kforge_mcp.core.requests import WarmUpRequest
from kforge_mcp.core.settings import Settings
from kforge_mcp.worker_jobs import handle_warm_up
before = "torch._dynamo" in sys.modules
reply = handle_warm_up(WarmUpRequest(device="cpu", stage="paths"), print, pathlib.Path(sys.argv[1]), {"settings": Settings.read()})
print(json.dumps({"before": before, "after": "torch._dynamo" in sys.modules, "reply": reply}))
"""
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["before"] is False and result["after"] is True, result
    assert result["reply"]["seconds"] > 0
