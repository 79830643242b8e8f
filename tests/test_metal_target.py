"""The metal target: static checks of Metal sources and their dispatch calls (anywhere), the
Metal compiler's messages mapped to lines of the Python file, the clear error where there is no
Apple GPU (list_targets, compile and verify through a real MCP client), and, marked `mps`, the
examples on an Apple GPU."""

from __future__ import annotations

import ast
import platform
from pathlib import Path

import pytest
import torch
from conftest import example, problem
from mcp import Client

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.problem import Source
from kforge_mcp.targets import get_target
from kforge_mcp.targets.metal.calls import (
    _module_constants,
    compiler_diagnostics,
    expansion_map,
    find_libraries,
    static_diagnostics,
)
from kforge_mcp.targets.metal.kernels import parse_kernels
from kforge_mcp.targets.metal.target import NEEDS, _CountedLibrary, unavailable_reason

EXAMPLES = ["fused_bias_gelu", "row_softmax", "gemm_bias_relu"]
HAS_MPS = platform.system() == "Darwin" and torch.backends.mps.is_available() and hasattr(torch.mps, "compile_shader")
MPS_REASON = "needs macOS with an Apple GPU and torch >= 2.7"


def src(text: str) -> Source:
    return Source(text=text, name="<candidate>")


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


def libraries(text: str):
    tree = ast.parse(text)
    return find_libraries(tree, text, _module_constants(tree))


def errors(diags):
    return [d for d in diags if d.severity == "error"]


CANDIDATE = '''import torch
import torch.nn as nn

SRC = """
kernel void axpy(device const float* x [[buffer(0)]],
                 device float* y [[buffer(1)]],
                 constant float& a [[buffer(2)]],
                 constant long& n [[buffer(3)]],
                 uint i [[thread_position_in_grid]]) {
    if (i < n) { y[i] = a * x[i] + y[i]; }
}
"""
GROUP = 256
lib = torch.mps.compile_shader(SRC)


class ModelNew(nn.Module):
    def forward(self, x, y):
        lib.axpy(x, y, 2.0, x.numel(), threads=x.numel(), group_size=GROUP)
        return y
'''


# ---- static checks ----


@pytest.mark.parametrize("name", EXAMPLES)
def test_shipped_metal_examples_pass_the_static_checks(name):
    path = example(name, "metal")
    text = Path(path).read_text()
    assert static_diagnostics(Source(text=text, name=path)) == []
    (lib,) = libraries(text)
    assert len(lib.kernels) == 1 and lib.kernels[0].bindable()


def test_kernel_signature_parsing():
    (k,) = parse_kernels(CANDIDATE.split('"""')[1])
    assert k.name == "axpy" and k.return_type == "void" and k.grid_dims() == 1
    assert [(p.name, p.kind, p.base_type, p.buffer_index) for p in k.bindable()] == [
        ("x", "buffer", "float", 0),
        ("y", "buffer", "float", 1),
        ("a", "scalar", "float", 2),
        ("n", "scalar", "long", 3),
    ]
    assert k.params[-1].builtin == "thread_position_in_grid"


def test_a_correct_dispatch_has_no_findings():
    assert static_diagnostics(src(CANDIDATE)) == []


@pytest.mark.parametrize(
    "call, message",
    [
        (
            "lib.axpy(x, y, 2.0, threads=x.numel(), group_size=GROUP)",
            "axpy takes 4 arguments (x, y, a, n) but this dispatch passes 3",
        ),
        ("lib.axpy(x, 1.0, 2.0, x.numel(), threads=x.numel(), group_size=GROUP)", "argument 'y' is a buffer"),
        ("lib.axpy(x, y, 2, x.numel(), threads=x.numel(), group_size=GROUP)", "argument 'a' is float but a Python int"),
        ("lib.axpy(x, y, 2.0, 3.5, threads=x.numel(), group_size=GROUP)", "argument 'n' is long but a Python float"),
        (
            "lib.axpy(x, y, 2.0, x.numel(), threads=x.numel(), group_size=2048)",
            "2048 threads per threadgroup; Apple GPUs allow at most 1024",
        ),
        ("lib.axpy(x, y, 2.0, x.numel(), threads=x.numel(), group_size=(64, 32))", "(64, 32) is 2048 threads"),
        ("lib.axpy(x, y, 2.0, x.numel(), threads=0, group_size=GROUP)", "threads=(0,) must be a positive int"),
        ("lib.saxpy(x, y, 2.0, x.numel(), threads=x.numel())", "the Metal library has no such kernel (kernels: axpy)"),
    ],
)
def test_dispatch_errors_point_at_the_call(call, message):
    text = CANDIDATE.replace("lib.axpy(x, y, 2.0, x.numel(), threads=x.numel(), group_size=GROUP)", call)
    found = errors(static_diagnostics(src(text)))
    assert len(found) == 1 and message in found[0].message, found
    assert found[0].line == line_of(text, call)


@pytest.mark.parametrize(
    "change, severity, message",
    [
        ("group_size=GROUP)", "warning", "not a multiple of the SIMD width 32"),
        ("threads=x.numel(), group_size=GROUP)", "warning", "no threads= at this dispatch"),
        ("threads=x.numel()", "warning", "grid position is 1-D but threads= gives 2"),
    ],
)
def test_dispatch_warnings(change, severity, message):
    replacement = {
        "group_size=GROUP)": "group_size=100)",
        "threads=x.numel(), group_size=GROUP)": "group_size=GROUP)",
        "threads=x.numel()": "threads=(64, 64)",
    }[change]
    text = CANDIDATE.replace(change, replacement, 1)
    found = [d for d in static_diagnostics(src(text)) if message in d.message]
    assert found and found[0].severity == severity and found[0].line == line_of(text, "lib.axpy(")


def test_python_int_to_a_32_bit_scalar_is_a_warning():
    text = CANDIDATE.replace("constant long& n", "constant int& n")
    (d,) = static_diagnostics(src(text))
    assert d.severity == "warning" and "sends a Python int as int64" in d.message


@pytest.mark.parametrize(
    "old, new, message, at",
    [
        ("kernel void axpy", "kernel float axpy", "returns float: Metal kernels return void", "kernel float axpy"),
        (
            "constant long& n [[buffer(3)]]",
            "threadgroup float* n [[threadgroup(0)]]",
            "is threadgroup memory",
            "threadgroup float* n",
        ),
        ("constant long& n [[buffer(3)]]", "long n [[buffer(3)]]", "is neither a buffer", "long n [[buffer(3)]]"),
        (
            "constant long& n [[buffer(3)]]",
            "constant long& n [[buffer(4)]]",
            "buffer indices [0, 1, 2, 4]",
            "kernel void axpy",
        ),
        (
            "    if (i < n)",
            "    threadgroup float big[8192][2];\n    if (i < n)",
            "declares 65536 bytes of threadgroup memory",
            "{",
        ),
    ],
)
def test_kernel_errors_point_at_the_msl_line_in_the_python_file(old, new, message, at):
    text = CANDIDATE.replace(old, new)
    found = [d for d in errors(static_diagnostics(src(text))) if message in d.message]
    assert found, static_diagnostics(src(text))
    assert found[0].line == line_of(text, at)


def test_no_compile_shader_call_and_a_runtime_built_source():
    (d,) = static_diagnostics(src("import torch\nclass ModelNew: pass\n"))
    assert d.severity == "error" and "no torch.mps.compile_shader" in d.message
    text = CANDIDATE.replace("lib = torch.mps.compile_shader(SRC)", "lib = torch.mps.compile_shader(SRC.format())")
    (d,) = static_diagnostics(src(text))
    assert d.severity == "note" and "built at run time" in d.message and d.line == line_of(text, "compile_shader(")


def test_kernel_bound_to_an_attribute_is_checked_too():
    text = CANDIDATE.replace(
        "        lib.axpy(x, y, 2.0, x.numel(),", "        self.k = lib.axpy\n        self.k(x, y, 2.0,"
    )
    (d,) = errors(static_diagnostics(src(text)))
    assert "takes 4 arguments" in d.message and d.line == line_of(text, "self.k(x, y")


# ---- the Metal compiler's messages ----


def test_compiler_messages_map_through_inlined_headers_to_python_lines():
    path = example("fused_bias_gelu", "metal")
    text = Path(path).read_text()
    (lib,) = libraries(text)
    lines = expansion_map(lib.msl)
    msl_line = next(i for i, line in enumerate(lib.msl.split("\n"), start=1) if "out[i] =" in line)
    compiled_line = next(i for i, (orig, header) in enumerate(lines, start=1) if orig == msl_line and header is None)
    assert compiled_line > msl_line + 50  # special_math.h and what it includes came first
    header_line = next(i for i, (_, header) in enumerate(lines, start=1) if header)
    message = (
        f"program_source:{compiled_line}:22: error: use of undeclared identifier 'vv'\n"
        f"program_source:{header_line}:3: note: candidate function not viable"
    )
    d1, d2 = compiler_diagnostics(message, lib, Source(text=text, name=path))
    assert (d1.line, d1.column, d1.severity) == (line_of(text, "out[i] ="), 22, "error")
    assert "undeclared identifier 'vv'" in d1.message and d1.file == path
    assert d2.line == line_of(text, "#include <c10/metal/special_math.h>") and d2.severity == "note"
    assert d2.message.startswith("in c10/metal/special_math.h (included here)")


def test_unparsed_compiler_output_is_kept_whole():
    text = CANDIDATE
    (lib,) = libraries(text)
    (d,) = compiler_diagnostics("Metal device lost", lib, src(text))
    assert d.line == line_of(text, "compile_shader(") and "Metal device lost" in d.message


def test_dispatches_are_counted_through_the_library_proxy():
    target = get_target("metal")

    class FakeKernel:
        max_threads_per_threadgroup = 1024

        def __call__(self, *args, **kwargs):
            return "ran"

    class FakeLib:
        axpy = FakeKernel()

    lib = _CountedLibrary(FakeLib())
    with target.launch_counter() as counter:
        assert lib.axpy(1, threads=4) == "ran" and lib.axpy(2) == "ran"
        assert lib.axpy.max_threads_per_threadgroup == 1024
    assert counter.count == 2
    lib.axpy()  # outside the context: not counted, not an error
    assert counter.count == 2


# ---- where there is no Apple GPU: a clear error, never a crash ----


@pytest.mark.skipif(HAS_MPS, reason="checks the behaviour without an Apple GPU")
def test_probe_and_load_name_what_is_needed(tmp_path):
    target = get_target("metal")
    status = target.probe(["cpu"])
    assert not status.available and status.reason.startswith(NEEDS) and status.requires == ["metal"]
    assert not status.can_compile and unavailable_reason() == status.reason
    with pytest.raises(InputError, match="needs macOS with an Apple GPU and torch >= 2.7"):
        target.load(src(CANDIDATE), "mps", tmp_path)


@pytest.mark.skipif(HAS_MPS, reason="checks the behaviour without an Apple GPU")
@pytest.mark.anyio
async def test_tools_without_an_apple_gpu_say_what_is_needed(server):
    bad = CANDIDATE.replace("group_size=GROUP", "group_size=4096")
    async with Client(server) as client:
        listed = await client.call_tool("list_targets", {})
        metal = next(t for t in listed.structured_content["targets"] if t["name"] == "metal")
        compiled = await client.call_tool("compile", {"target": "metal", "source": bad, "wait_s": 600})
        verified = await client.call_tool(
            "verify",
            {
                "problem": problem("fused_bias_gelu"),
                "target": "metal",
                "candidate": example("fused_bias_gelu", "metal"),
                "wait_s": 600,
            },
        )
    assert not metal["available"] and "needs macOS with an Apple GPU and torch >= 2.7" in metal["reason"]
    assert metal["requires"] == ["metal"]
    assert compiled.is_error and "target 'metal' cannot compile here: needs macOS" in compiled.content[0].text
    assert f"<source>:{line_of(bad, 'group_size=4096')}: error:" in compiled.content[0].text  # static checks ran
    assert verified.is_error and "target 'metal' is not available here: needs macOS" in verified.content[0].text


# ---- on an Apple GPU (pytest -m mps on a Mac) ----


@pytest.mark.mps
@pytest.mark.skipif(not HAS_MPS, reason=MPS_REASON)
@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_pass_on_an_apple_gpu(engine, name):
    report = engine.verify(problem(name), example(name, "metal"), target="metal", baselines=["eager"], trials=3)
    assert report.verdict == "pass", report
    assert report.execution == "metal" and report.device == "mps" and report.timing.candidate.clock.startswith("mps")


@pytest.mark.mps
@pytest.mark.skipif(not HAS_MPS, reason=MPS_REASON)
def test_compile_reports_pipeline_limits_on_an_apple_gpu(engine):
    report = engine.compile("metal", example("row_softmax", "metal"))
    assert report.ok and report.kernels[0].name == "row_softmax"
    assert int(report.kernels[0].signature["max_threads_per_threadgroup"]) >= 256


@pytest.mark.mps
@pytest.mark.skipif(not HAS_MPS, reason=MPS_REASON)
def test_compile_error_on_an_apple_gpu_points_at_the_python_line(engine):
    text = CANDIDATE.replace("y[i] = a * x[i] + y[i];", "y[i] = a * xx[i] + y[i];")
    report = engine.compile("metal", text)
    assert not report.ok
    d = next(d for d in report.diagnostics if d.severity == "error")
    assert d.line == line_of(text, "xx[i]") and "xx" in d.message


@pytest.mark.mps
@pytest.mark.skipif(not HAS_MPS, reason=MPS_REASON)
def test_profile_on_an_apple_gpu_times_each_forward(engine):
    report = engine.profile(problem("fused_bias_gelu"), example("fused_bias_gelu", "metal"), target="metal")
    assert not report.errors and report.device_ms_per_forward > 0 and report.execution == "metal"
