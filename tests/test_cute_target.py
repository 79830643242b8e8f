"""The cute target without a GPU: CuTe DSL candidates compile to PTX and cubin for sm_90a
(one forward traced on the problem's CPU inputs), errors map to lines, CuTe C++ goes
through the cuda path."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from conftest import example, hostile, problem
from mcp import Client

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(importlib.util.find_spec("cutlass") is None, reason="needs nvidia-cutlass-dsl"),
]


async def call(server, name, args):
    async with Client(server) as client:
        return await client.call_tool(name, args)


@pytest.mark.parametrize("name", ["fused_bias_gelu", "row_softmax", "gemm_bias_relu"])
async def test_dsl_examples_compile_to_ptx_for_sm90a(server, name):
    result = await call(
        server,
        "compile",
        {
            "target": "cute",
            "source": example(name, "cute"),
            "problem": problem(name),
            "arch": "sm_90a",
            "emit_ptx": True,
        },
    )
    assert not result.is_error, result.content
    report = result.structured_content
    assert report["ok"] is True and report["signature_source"] == "traced", report["diagnostics"]
    (ptx,) = report["ptx"].values()
    assert ".target sm_90a" in ptx and ".entry" in ptx
    (k,) = report["kernels"]
    assert k["name"].endswith("_kernel") and k["registers"] > 0 and k["spills"] == 0


async def test_dsl_error_points_at_the_kernel_line(server):
    report = (
        await call(
            server,
            "compile",
            {"target": "cute", "source": hostile("cute_undefined"), "problem": problem("fused_bias_gelu")},
        )
    ).structured_content
    assert report["ok"] is False
    (d,) = [d for d in report["diagnostics"] if d["severity"] == "error"]
    assert d["line"] == 25 and "gBias" in d["message"] and "\x1b" not in d["message"]


async def test_without_a_problem_it_says_what_to_pass(server):
    report = (
        await call(server, "compile", {"target": "cute", "source": example("row_softmax", "cute")})
    ).structured_content
    assert report["ok"] is False
    assert any("pass `problem`" in d["message"] for d in report["diagnostics"])


@pytest.mark.slow
async def test_cute_cpp_goes_through_the_cuda_path(server):
    if importlib.util.find_spec("cutlass_library") is None:
        pytest.skip("needs nvidia-cutlass (CuTe C++ headers)")
    src = (
        open(example("fused_bias_gelu", "cuda"))
        .read()
        .replace("#include <cuda_runtime.h>", "#include <cuda_runtime.h>\n#include <cute/tensor.hpp>", 1)
    )
    report = (await call(server, "compile", {"target": "cute", "source": src})).structured_content
    assert report["target"] == "cute" and report["ok"] is True, report["diagnostics"]
    assert report["kernels"][0]["registers"] > 0


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="an NVIDIA GPU is here: tests/test_gpu_nvidia.py verifies CuTe on it"
)
async def test_verify_needs_a_gpu(server):
    result = await call(
        server,
        "verify",
        {"problem": problem("row_softmax"), "candidate": example("row_softmax", "cute"), "target": "cute"},
    )
    assert result.is_error and "needs an NVIDIA GPU" in result.content[0].text
