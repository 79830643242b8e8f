"""Triton compile reports what a launch builds: specialised as the launch is, per autotune config,
with errors merged, and for Hopper tensor descriptors. Everything compiles for sm_90a on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import example, hostile, problem

from kforge_mcp.core.problem import Source
from kforge_mcp.targets.nvidia import cubin_resources
from kforge_mcp.targets.triton.compile import compile_candidate
from kforge_mcp.targets.triton.infer import UNSPECIALISED_NOTE

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # triton's FP-fusion default notice

DIV16 = [["tt.divisibility", 16]]


def source(path) -> Source:
    return Source(text=Path(path).read_text(), name=str(path))


def build(candidate, prob, tmp_path, arch=None):
    work = tmp_path / f"w{len(list(tmp_path.iterdir()))}"
    work.mkdir()
    return compile_candidate(source(candidate), arch, source(prob) if prob else None, work)


def gemm_by_hand(tmp_path, divisibility=True):
    """The example GEMM built straight through triton.compile for the launch on the example problem:
    sizes and leading strides divisible by 16, unit strides constant."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kforge_mcp.core.source import import_source

    fn = import_source(source(example("gemm_bias_relu", "triton")), tmp_path, "by_hand").linear_relu_kernel
    names = fn.arg_names
    constexprs = {"stride_xk": 1, "stride_wk": 1, "stride_on": 1, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}
    signature = {n: "constexpr" if n in constexprs else "*fp32" if n.endswith("ptr") else "i32" for n in names}
    attrs = {(names.index(n),): DIV16 for n in names if n not in constexprs and divisibility}
    return fn, triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", 90, 32))


def test_traced_build_is_the_one_triton_builds_for_the_launch(tmp_path):
    """The GEMM at 256x512x384: every pointer 16-byte aligned, every size and leading stride a
    multiple of 16, unit strides constant. Triton, given that signature by hand, builds the same
    kernel; the unspecialised guess of compile-without-problem uses more registers."""
    cand = example("gemm_bias_relu", "triton")
    traced = build(cand, problem("gemm_bias_relu"), tmp_path)
    inferred = build(cand, None, tmp_path)
    assert traced.ok and traced.signature_source == "traced", traced.diagnostics
    (ours,) = traced.kernels
    assert ours.constexprs == {
        **{s: "1" for s in ("stride_xk", "stride_wk", "stride_on")},
        **{"BLOCK_M": "64", "BLOCK_N": "64", "BLOCK_K": "32"},
    }
    assert ours.signature["stride_xk"] == "constexpr" and ours.signature["stride_xm"] == "i32"
    assert set(ours.divisible_by_16) == {"x_ptr", "w_ptr", "b_ptr", "out_ptr", "M", "N", "K"} | {
        "stride_xm",
        "stride_wn",
        "stride_om",
    }

    fn, by_hand = gemm_by_hand(tmp_path)
    regs = cubin_resources(by_hand.asm["cubin"])[by_hand.name]["REG"]
    assert ours.registers == regs and traced.ptx["linear_relu_kernel"] == by_hand.asm["ptx"]

    (guess,) = inferred.kernels
    assert inferred.ok and guess.divisible_by_16 == [] and guess.signature["stride_xk"] == "i32"
    assert guess.registers != ours.registers
    assert any(d.message == UNSPECIALISED_NOTE and d.severity == "note" for d in inferred.diagnostics)


def test_sizes_that_are_not_multiples_of_16_are_not_specialised(tmp_path):
    odd = tmp_path / "odd_gemm.py"
    odd.write_text(Path(problem("gemm_bias_relu")).read_text().replace("= 256, 512, 384", "= 100, 512, 384"))
    report = build(example("gemm_bias_relu", "triton"), odd, tmp_path)
    (k,) = report.kernels
    assert report.ok and "M" not in k.divisible_by_16 and {"N", "K", "x_ptr"} <= set(k.divisible_by_16)


@pytest.mark.parametrize("with_problem", [True, False])
def test_each_autotune_config_is_reported_and_a_shared_error_once(tmp_path, with_problem):
    report = build(hostile("autotuned"), problem("fused_bias_gelu") if with_problem else None, tmp_path)
    labels = ["BLOCK=256, num_warps=2, num_stages=1", "BLOCK=1024, num_warps=8, num_stages=2"]
    assert [k.config for k in report.kernels] == labels
    assert [(k.num_warps, k.num_stages, k.constexprs["BLOCK"]) for k in report.kernels] == [
        (2, 1, "256"),
        (8, 2, "1024"),
    ]
    assert list(report.ptx) == [f"bias_gelu_scale_kernel [{label}]" for label in labels]
    a, b = report.ptx.values()
    assert ".reqntid 64" in a and ".reqntid 256" in b  # each config's own PTX, not the last one's
    (failed,) = [d for d in report.diagnostics if "BLOCK above 4096" in d.message]
    assert "[BLOCK=8192, num_warps=8, num_stages=3]; [BLOCK=16384, num_warps=16, num_stages=3]" in failed.message
    assert failed.severity == "warning" and failed.line == 21 and "drops these configs" in failed.message
    assert report.ok  # the autotuner skips configs that fail a static_assert; the others run


def test_an_error_in_every_config_is_one_error_naming_them(tmp_path):
    broken = tmp_path / "broken.py"
    text = Path(hostile("autotuned")).read_text()
    broken.write_text(text.replace("y * scale, mask=mask)", "y * undefined_scale, mask=mask)"))
    report = build(broken, problem("fused_bias_gelu"), tmp_path)
    assert not report.ok and report.kernels == [] and report.ptx is None
    (error,) = [d for d in report.diagnostics if "undefined_scale" in d.message]
    assert error.severity == "error" and error.line == 26
    assert error.message.count("[BLOCK=") == 2  # the two configs the static_assert lets through
    # no config builds, so the static_assert is an error too: the kernel cannot run at all
    (asserted,) = [d for d in report.diagnostics if "BLOCK above 4096" in d.message]
    assert asserted.severity == "error" and asserted.message.count("[BLOCK=") == 2


def test_host_tensor_descriptor_gemm_compiles_for_sm90a(tmp_path):
    cand = example("gemm_bias_relu", "triton_tma")
    report = build(cand, problem("gemm_bias_relu"), tmp_path, arch="sm_90a")
    assert report.ok, report.diagnostics
    (k,) = report.kernels
    assert (
        k.signature["x_desc"] == "tensordesc<fp32[128, 32]>" and k.signature["out_desc"] == "tensordesc<fp32[128, 128]>"
    )
    assert k.registers > 0 and k.shared_bytes > 64 * 1024 and (k.num_warps, k.num_stages) == (8, 3)
    ptx = report.ptx["linear_relu_tma_kernel"]
    assert "cp.async.bulk.tensor" in ptx and "wgmma.mma_async" in ptx and ".target sm_90a" in ptx

    guessed = build(cand, None, tmp_path)
    (warning,) = [d for d in guessed.diagnostics if d.severity == "warning"]
    assert guessed.kernels == [] and "x_desc, w_desc, out_desc" in warning.message and "`problem`" in warning.message


def test_device_side_tensor_descriptor_compiles_for_sm90a(tmp_path):
    report = build(hostile("device_descriptor"), problem("fused_bias_gelu"), tmp_path)
    assert report.ok, report.diagnostics
    (k,) = report.kernels
    assert k.signature["x_ptr"] == "*fp32" and "x_ptr" in k.divisible_by_16
    assert "cp.async.bulk.tensor" in report.ptx["bias_gelu_scale_tma_kernel"]


def test_a_launch_with_a_missing_argument_names_the_kernel(tmp_path):
    bad = tmp_path / "missing.py"
    text = Path(example("fused_bias_gelu", "triton")).read_text()
    bad.write_text(text.replace("n, x.shape[-1], self.scale, BLOCK=BLOCK)", "n, x.shape[-1], BLOCK=BLOCK)"))
    report = build(bad, problem("fused_bias_gelu"), tmp_path)
    assert not report.ok and "bias_gelu_scale_kernel" in report.diagnostics[-1].message
    assert "scale" in report.diagnostics[-1].message and "tracing ModelNew.forward" in report.diagnostics[-1].message


@pytest.mark.anyio
async def test_compile_tool_reports_configs_through_a_client(server):
    from mcp import Client

    args = {"target": "triton", "source": hostile("autotuned"), "problem": problem("fused_bias_gelu"), "wait_s": 600}
    async with Client(server) as client:
        result = await client.call_tool("compile", {**args, "emit_ptx": True})
    report = result.structured_content
    assert not result.is_error and report["ok"] and report["signature_source"] == "traced"
    assert [k["config"] for k in report["kernels"]] == [
        "BLOCK=256, num_warps=2, num_stages=1",
        "BLOCK=1024, num_warps=8, num_stages=2",
    ]
    assert "n_elements" in report["kernels"][0]["divisible_by_16"] and len(report["ptx"]) == 2
