"""Work on weights alone, found by following the data through one forward, and the advice to do it once per
weight version (advice/rules/structure.py weights_once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest

from kforge_mcp.advice import agent
from kforge_mcp.judge.roofline import make_roofline
from kforge_mcp.profiling.report import KernelProfile, ProfileReport

PROBLEM = "tests/problems/linear_relu_small.py"
H200 = "NVIDIA H200"


TRACE = """
import json, sys
from pathlib import Path
from kforge_mcp.core.problem import build_models, load_problem
from kforge_mcp.core.profile import ProfileReport
from kforge_mcp.core.source import Source, import_source
from kforge_mcp.profiling.weight_work import attach_weight_work
from kforge_mcp.targets import get_target

problem_path, candidate_path, workdir = sys.argv[1:]
problem = load_problem(Source(text=Path(problem_path).read_text(), name=problem_path), Path(workdir))
module = import_source(Source(text=Path(candidate_path).read_text(), name=candidate_path), Path(workdir), "candidate")
_, model = build_models(problem, module, "cpu", build_reference=False)
report = ProfileReport()
attach_weight_work(report, model, problem.make_inputs(7, "cpu"), problem.make_inputs(8, "cpu"),
                   get_target("triton").launch_counter)
print(json.dumps(report.weight_work))
"""


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    """Each candidate's weight work, traced through Triton's interpreter in a process of its own (a profile traces
    it where device kernels ran: on a GPU)."""
    out = {}
    for c in ("weight_transpose_every_forward", "weight_transpose_cached", "weight_scale_shared_buffer"):
        workdir = tmp_path_factory.mktemp(c)
        proc = subprocess.run(
            [sys.executable, "-c", TRACE, PROBLEM, f"tests/candidates/{c}.py", str(workdir)],
            env={**os.environ, "TRITON_INTERPRET": "1"},
            capture_output=True,
            text=True,
            check=True,
        )
        out[c] = types.SimpleNamespace(weight_work=json.loads(proc.stdout.splitlines()[-1]), errors=[])
    return out


def test_a_profile_without_device_kernels_traces_no_weight_work(engine):
    """Its one reader, the weights_once rule, reads device kernels: on the interpreter the forwards are not run."""
    r = engine.profile(PROBLEM, "tests/candidates/weight_transpose_every_forward.py", target="triton", device="cpu")
    assert not r.errors and not r.device_kernels() and r.weight_work == {}
    assert "weight_work" not in r.phases


def test_a_kernel_that_transposes_the_weight_every_forward_is_weight_work(profiles):
    r = profiles["weight_transpose_every_forward"]
    assert not r.errors
    # the transpose reads only linear.weight; the GEMM reads the input too, so it is not weight work
    assert r.weight_work == {"transpose_kernel": 1.0}


def test_a_transpose_kept_per_weight_version_leaves_no_weight_work(profiles):
    assert profiles["weight_transpose_cached"].weight_work == {}


def test_launches_on_the_weight_that_share_a_buffer_with_the_inputs_are_still_weight_work(profiles):
    """x's maximum goes to amax[0] and W's to amax[1]: the launches on W never touch the bytes x reached."""
    work = profiles["weight_scale_shared_buffer"].weight_work
    assert set(work) == {"absmax_kernel", "scaled_copy_kernel"}  # the GEMM reads the input: not weight work
    w_share = (64 * 48) / (64 * 48 + 32 * 64)  # by bytes: W's launches over both
    assert work["absmax_kernel"] == pytest.approx(w_share, abs=0.01)
    assert work["scaled_copy_kernel"] == pytest.approx(w_share, abs=0.01)


def gemm_after_split(frac_of_sol: float) -> ProfileReport:
    """A bf16x3 GEMM whose tensor pipe is 97% busy, after a split pass whose bytes are 83% the weight's."""
    gemm = KernelProfile(
        name="gemm_epilogue_kernel", device_ms=0.51, launches=1, pipes={"tensor_op_gmma": 97.4, "shared": 97.4}
    )
    split = KernelProfile(name="split3_kernel", device_ms=0.18, launches=2, dram_throughput_pct=70.0)
    roof = make_roofline(1.374e11, 3.4e8, "fp32", H200, 0.69, atol=1e-4, rtol=1e-4)
    roof.fraction_of_sol = frac_of_sol
    return ProfileReport(
        source="ncu",
        kernels=[split, gemm],  # in launch order: the split runs before the GEMM
        forwards=1,
        launches_per_forward=3,
        device_ms_per_forward=0.69,
        device_name=H200,
        roofline=roof,
        weight_work={"split3_kernel": 0.83},
        weights_read={"split3_kernel": ["gemm.weight"]},
    )


def test_weight_work_is_the_top_advice_when_the_gemm_is_at_its_pipe_limit():
    a = agent.analyze(gemm_after_split(0.6))
    top = a.recommendations[0]
    assert top.rule == "weights_once", [r.rule for r in a.recommendations]
    # its gain: the split's share of the forward times the share of its bytes that are the weight's
    assert top.expected_gain == pytest.approx(0.18 / 0.69 * 0.83, abs=0.002)
    assert "gemm.weight" in top.action and "_version" in top.action
    # the GEMM's own fraction (0.6 of the forward over its 74% share) is past the limit: nothing to feed
    assert "feed_tensor_pipe" not in [r.rule for r in a.recommendations]


def test_a_gemm_far_from_its_own_bound_is_still_told_to_feed_its_pipe():
    rules = [r.rule for r in agent.analyze(gemm_after_split(0.3)).recommendations]
    assert "feed_tensor_pipe" in rules
