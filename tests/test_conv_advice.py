"""Advice that knows convolutions, on real H100 profiles of Level 2 convolution kernels (tests/data/profiles): the
compute path read from what ran, not from a busy-looking pipe counter."""

from __future__ import annotations

import json
from pathlib import Path

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
