"""Advice on a machine without a GPU: a Triton candidate profiled on the CPU (the interpreter) is compiled for
an NVIDIA arch, and the analysis gives what that, the reference's structure and a device model's roofline
can give (advice/rules/compiled.py), and lists what needs a GPU run."""

from __future__ import annotations

import pytest

from kforge_mcp.advice import agent
from kforge_mcp.core.schemas import CompileReport, KernelResources
from kforge_mcp.judge.roofline import make_roofline
from kforge_mcp.profiling.report import KernelProfile, ProfileReport

GEMM = "examples/problems/gemm_bias_relu.py"
SOFTMAX = "examples/problems/row_softmax.py"
GPU_RULES = {"use_tensor_cores", "feed_tensor_pipe", "uncoalesced_access", "latency_bound", "at_the_limit"}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from kforge_mcp.api import Engine

    engine = Engine(home=tmp_path_factory.mktemp("home"))
    yield engine
    engine.close()


def cpu_advice(engine, problem: str, candidate: str, model: str | None = "h100"):
    report = engine.profile(problem, candidate, target="triton", device="cpu", iterations=1, device_model=model)
    assert not report.errors, report.errors
    return report, engine.analyze_profile(profile=report.model_dump())


def test_an_fma_gemm_profiled_on_the_cpu_is_told_to_use_tensor_cores(engine):
    """tl.dot with input_precision='ieee' compiles to no MMA instruction for sm_90a: the H100 model's roofline
    prices the tensor-core path the tolerance allows against the FMA pipe's best."""
    report, a = cpu_advice(engine, GEMM, "examples/candidates/gemm_bias_relu/triton_ieee.py")
    assert report.compiled.arch == "sm_90a" and [k.mma for k in report.compiled.kernels] == ["none"]
    rec = next(r for r in a.recommendations if r.rule == "compiled_tensor_cores")
    assert rec.title == f"Do the matrix products on tensor cores ({a.roofline.path})" and a.roofline.path != "fp32"
    assert rec.expected_gain_high > rec.expected_gain and "FMA pipe at its peak" in rec.gain_basis
    assert "tl.dot" in rec.action and any(e.metric == "bound on the FMA pipe" for e in rec.evidence)
    # what a GPU run would tell is listed, not guessed
    not_run = {n.rule: n.reason for n in a.rules_not_run}
    assert GPU_RULES <= set(not_run) and all("a GPU run" in not_run[r] for r in GPU_RULES)
    assert "needs a GPU run" in a.summary and "compiled for sm_90a" in a.summary and "use_tensor_cores" in a.summary


def test_one_warp_programs_profiled_on_the_cpu_are_told_to_launch_more_warps(engine):
    report, a = cpu_advice(engine, SOFTMAX, "examples/candidates/row_softmax/triton_naive.py", model=None)
    assert {k.num_warps for k in report.compiled.kernels} == {1}
    top = a.recommendations[0]
    assert top.rule == "compiled_occupancy" and top.priority == "high" and "num_warps=4 or 8" in top.action
    assert top.expected_gain == pytest.approx(1 - 1 / 4, abs=1e-3)  # three kernels, each a third, each 1 warp of 4
    assert "each of the 3 kernels taken as 1/3" in top.gain_basis
    assert "--device-model" in a.summary  # no device model named: no roofline to price tensor cores with


def compiled_report(*kernels: KernelResources, roofline=None) -> ProfileReport:
    return ProfileReport(
        source="torch.profiler",
        target="triton",
        device="cpu",
        device_name="cpu",
        kernels=[KernelProfile(name="<python in forward: Triton interpreter / glue>", kind="cpu", device_ms=5.0)],
        roofline=roofline,
        compiled=CompileReport(ok=True, target="triton", arch="sm_90a", kernels=list(kernels)),
    )


def test_spills_and_an_unpipelined_mma_loop_from_the_compile():
    spilling = KernelResources(name="softmax_kernel", registers=255, spills=312, num_warps=4, num_stages=1, mma="none")
    gemm = KernelResources(name="gemm_kernel", registers=168, spills=0, num_warps=4, num_stages=1, mma="wgmma")
    a = agent.analyze(compiled_report(spilling, gemm))
    recs = {r.rule: r for r in a.recommendations}
    assert recs["compiled_spills"].kernels == ["softmax_kernel"] and "BLOCK" in recs["compiled_spills"].action
    assert recs["compiled_spills"].expected_gain == pytest.approx(0.5 * 0.1)
    assert recs["compiled_pipeline"].kernels == ["gemm_kernel"] and recs["compiled_pipeline"].priority == "low"
    assert "num_stages 3-5" in recs["compiled_pipeline"].action
    assert "compiled_tensor_cores" not in recs  # a kernel issues wgmma already


def test_registers_that_cap_resident_warps_count_outside_gemm_problems_only():
    """255 registers x 256 threads: one block of 8 warps per Hopper SM (65536 registers)."""
    heavy = KernelResources(name="layernorm_kernel", registers=255, spills=0, num_warps=8, num_stages=1, mma="none")
    a = agent.analyze(compiled_report(heavy))
    rec = next(r for r in a.recommendations if r.rule == "compiled_occupancy")
    assert rec.priority == "low" and rec.expected_gain == pytest.approx(1 - 8 / 16)
    assert {(e.metric, e.value) for e in rec.evidence} >= {
        ("resident warps per SM on sm_90a", 8),
        ("what limits them", "registers"),
    }
    gemm_problem = make_roofline(2 * 1024**3, 3 * 4 * 1024**2, "fp32", "H100 SXM")
    a = agent.analyze(compiled_report(heavy, roofline=gemm_problem))
    assert "compiled_occupancy" not in {
        r.rule for r in a.recommendations
    }  # it may be the GEMM: low occupancy by design


def test_an_autotuned_kernel_counts_only_when_every_config_has_the_cause():
    def config(warps: int) -> KernelResources:
        return KernelResources(name="row_kernel", config=f"num_warps={warps}", num_warps=warps, mma="none")

    assert "compiled_occupancy" not in {
        r.rule for r in agent.analyze(compiled_report(config(1), config(8))).recommendations
    }
    rec = agent.analyze(compiled_report(config(1), config(2))).recommendations[0]
    assert rec.rule == "compiled_occupancy" and rec.expected_gain == pytest.approx(1 - 2 / 4)  # the least it saves
