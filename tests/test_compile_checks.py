"""What compile and verify say about a candidate beyond the compiler's own errors: shared memory past a
block's limit, the toolchain that made the report, where an interpreter error came from, a mistyped
path, and compile's argument under verify's name."""

from __future__ import annotations

import pytest
from conftest import example, hostile, problem
from mcp import Client

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.problem import looks_like_path, resolve_source
from kforge_mcp.platforms.nvidia.compile_checks import shared_memory_limit

pytestmark = pytest.mark.anyio


async def compile_call(server, args):
    async with Client(server) as client:
        return await client.call_tool("compile", {"target": "triton", "wait_s": 600, **args})


async def test_a_kernel_past_the_shared_memory_limit_is_an_error_naming_it_and_the_bytes(server):
    result = await compile_call(server, {"source": hostile("shared_too_large"), "arch": "sm_90a"})
    report = result.structured_content
    kernel = report["kernels"][0]
    assert kernel["shared_bytes"] > 232_448, kernel  # 3 stages of 256x64 and 64x256 fp32 tiles
    assert not report["ok"]
    error = report["diagnostics"][0]
    assert error["severity"] == "error" and error["kernel"] == "big_tiles_kernel"
    assert f"{kernel['shared_bytes']:,} bytes" in error["message"] and "232,448" in error["message"]


async def test_a_kernel_within_the_limit_compiles_ok_and_the_report_names_its_toolchain(server):
    import triton

    report = (await compile_call(server, {"source": example("row_softmax", "triton")})).structured_content
    assert report["ok"] and not [d for d in report["diagnostics"] if "shared memory" in d["message"]]
    assert report["toolchain"]["triton"] == triton.__version__
    assert report["toolchain"]["ptxas"].count(".") == 2  # e.g. 12.9.86, from the bundled ptxas Triton used


def test_shared_memory_limits_follow_the_arch():
    assert shared_memory_limit("sm_90a") == shared_memory_limit("sm_90") == 232_448
    assert shared_memory_limit("sm_80") == 166_912 and shared_memory_limit("sm_89") == 101_376
    assert shared_memory_limit("sm_37") is None  # not in the table: no check rather than a guess


async def test_compile_takes_the_candidate_under_verifys_name_too(server):
    path = example("row_softmax", "triton")
    report = (await compile_call(server, {"candidate": path})).structured_content
    assert report["ok"] and report["kernels"][0]["name"] == "softmax_kernel"
    both = await compile_call(server, {"candidate": path, "source": hostile("with_defaults")})
    assert both.is_error and "not both" in both.content[0].text
    neither = await compile_call(server, {})
    assert neither.is_error and "source" in neither.content[0].text


@pytest.mark.parametrize("value", ["kernels/gemm", "gemm.cu", "~/kernels/gemm.txt", "./gemm", "C:\\k\\gemm"])
def test_a_value_shaped_like_a_path_that_does_not_exist_is_file_not_found(value):
    assert looks_like_path(value)
    with pytest.raises(InputError, match="file not found"):
        resolve_source(value, "candidate")


@pytest.mark.parametrize("value", ["import torch", "x = a / b", "class ModelNew: pass", "print('a.py')"])
def test_one_line_of_code_is_still_source_text(value):
    assert not looks_like_path(value)
    assert resolve_source(value, "candidate").name == "<candidate>"


async def test_a_mistyped_path_is_a_tool_error_not_a_syntax_error(server, tmp_path):
    result = await compile_call(server, {"source": str(tmp_path / "kernels" / "gemm")})
    assert result.is_error and "file not found" in result.content[0].text


def test_an_interpreter_error_in_tl_load_points_at_the_load(engine):
    report = engine.verify(
        problem("row_softmax"), hostile("load_not_a_pointer"), target="triton", trials=1, baselines=["eager"]
    )
    assert report.verdict == "error"
    error, note = report.diagnostics[0], report.diagnostics[1]
    assert error.severity == "error" and error.line == 14 and "tl.load" in error.message  # the load
    assert note.severity == "note" and note.line == 29  # the launch that re-raised it
