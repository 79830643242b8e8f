"""Every tool through a real MCP client connected to the real server in-process."""

from __future__ import annotations

import time

import pytest
from conftest import example, hostile, problem
from mcp import Client

pytestmark = pytest.mark.anyio

SOFTMAX = problem("row_softmax")
FAST = {"baselines": ["eager"], "trials": 2}


async def call(server, name, args, **kwargs):
    if name in ("verify", "compile"):
        args = {"wait_s": 600, **args}  # a busy 2-core CI machine must not turn a result into a job id
    async with Client(server) as client:
        return await client.call_tool(name, args, **kwargs)


async def test_tools_are_the_contract(server):
    async with Client(server) as client:
        names = {t.name for t in (await client.list_tools()).tools}
    assert names == {
        "list_targets",
        "compile",
        "verify",
        "job_status",
        "job_result",
        "job_cancel",
        "profile",
        "analyze_profile",
        "run_loop",
        "loop_start",
        "loop_submit",
        "verify_batch",
        "bench",
    }


async def test_list_targets_reports_every_target_honestly(server):
    result = await call(server, "list_targets", {})
    assert not result.is_error
    targets = {t["name"]: t for t in result.structured_content["targets"]}
    assert set(targets) == {"cuda", "cute", "triton", "metal"}
    assert targets["triton"]["available"] and "cpu" in targets["triton"]["devices"]
    assert targets["triton"]["versions"]["triton"]
    has_gpu = any(d.startswith("cuda") for d in targets["triton"]["devices"])
    for name in ("cuda", "cute"):
        assert targets[name]["can_compile"]
        assert targets[name]["available"] == has_gpu and (has_gpu or "needs an NVIDIA GPU" in targets[name]["reason"])
    assert not targets["metal"]["available"] and targets["metal"]["reason"]


# one example in the quick suite (-m "not slow"); the larger two in the full one
@pytest.mark.parametrize(
    "name",
    [
        "fused_bias_gelu",
        pytest.param("row_softmax", marks=pytest.mark.slow),
        pytest.param("gemm_bias_relu", marks=pytest.mark.slow),
    ],
)
async def test_honest_examples_pass(server, name):
    result = await call(
        server,
        "verify",
        {"problem": problem(name), "candidate": example(name, "triton"), "target": "triton", "baselines": ["eager"]},
    )
    report = result.structured_content
    assert not result.is_error, result.content
    assert report["verdict"] == "pass" and report["correct"] is True
    assert report["execution"] == "triton-interpreter" and report["device"] == "cpu"
    assert report["timing"]["candidate"]["median_ms"] > 0 and report["timing"]["eager"]["samples"] >= 3
    assert report["speedup"] > 0 and report["speedup_over"] == "eager"
    assert any(f["code"] == "interpreter_timing" for f in report["findings"])


@pytest.mark.slow
async def test_verify_times_the_torch_compile_baseline(server):
    result = await call(
        server,
        "verify",
        {"problem": SOFTMAX, "candidate": example("row_softmax", "triton"), "target": "triton", "trials": 1},
    )
    report = result.structured_content
    assert report["verdict"] == "pass"
    assert report["timing"]["compiled"]["median_ms"] > 0
    fastest = min(report["timing"]["eager"]["median_ms"], report["timing"]["compiled"]["median_ms"])
    assert report["speedup"] == pytest.approx(fastest / report["timing"]["candidate"]["median_ms"])


async def test_wrong_candidate_fails_with_mismatch_details(server):
    result = await call(
        server,
        "verify",
        {
            "problem": problem("fused_bias_gelu"),
            "target": "triton",
            "candidate": example("fused_bias_gelu", "triton_wrong"),
            **FAST,
        },
    )
    report = result.structured_content
    assert report["verdict"] == "fail" and report["correct"] is False
    m = report["mismatches"][0]
    assert m["max_abs_error"] > 1e-4 and m["first_mismatch_index"] is not None
    assert m["expected"] != m["got"] and m["atol"] == 1e-4
    assert report["timing"] is None  # a wrong kernel is not timed


@pytest.mark.slow
async def test_crash_is_contained_and_the_next_call_passes(server):
    result = await call(
        server,
        "verify",
        {
            "problem": problem("fused_bias_gelu"),
            "target": "triton",
            "candidate": example("fused_bias_gelu", "triton_crash"),
            **FAST,
        },
    )
    report = result.structured_content
    assert report["verdict"] == "error"
    assert "SIGABRT" in report["errors"][0]
    assert report["diagnostics"][0]["line"] == 17  # faulthandler's stack points at os.abort()
    again = await call(
        server,
        "verify",
        {"problem": SOFTMAX, "candidate": example("row_softmax", "triton"), "target": "triton", **FAST},
    )
    assert again.structured_content["verdict"] == "pass"


@pytest.mark.slow
async def test_hang_is_stopped_at_timeout(server):
    started = time.monotonic()
    result = await call(
        server, "verify", {"problem": SOFTMAX, "candidate": hostile("hang"), "target": "triton", "timeout_s": 8, **FAST}
    )
    report = result.structured_content
    # the call's limit is at most the time left before the 8 s timeout, which the message names
    assert report["verdict"] == "error" and "did not finish within" in report["errors"][0]
    assert "timeout_s (now 8 s)" in report["errors"][0], report["errors"]
    assert time.monotonic() - started < 30
    again = await call(
        server,
        "verify",
        {"problem": SOFTMAX, "candidate": example("row_softmax", "triton"), "target": "triton", **FAST},
    )
    assert again.structured_content["verdict"] == "pass"


async def test_exception_in_forward_is_an_error_verdict_with_its_line(server):
    result = await call(
        server, "verify", {"problem": SOFTMAX, "candidate": hostile("raises_in_forward"), "target": "triton", **FAST}
    )
    report = result.structured_content
    assert report["verdict"] == "error"
    assert "ValueError: cannot handle" in report["errors"][0]
    assert report["diagnostics"][0]["line"] == 7


@pytest.mark.parametrize(
    ("candidate", "error", "line"),
    [("no_modelnew", "defines no class ModelNew", None), ("syntax_error", "syntax error", 5)],
)
async def test_a_broken_candidate_is_an_error_verdict_not_a_tool_error(server, candidate, error, line):
    """What is wrong with the candidate is the candidate's verdict: one result shape for a reward."""
    args = {"problem": SOFTMAX, "candidate": hostile(candidate), "target": "triton", **FAST}
    result = await call(server, "verify", args)
    assert not result.is_error, result.content[0].text
    report = result.structured_content
    assert report["verdict"] == "error" and report["correct"] is False
    assert error in report["errors"][0]
    diagnostic = report["diagnostics"][0]
    assert diagnostic["file"].endswith(f"{candidate}.py") and diagnostic["line"] == line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"problem": hostile("problem_without_inputs")}, "does not define get_inputs"),
        ({"target": "vulkan"}, "unknown target 'vulkan'"),
        ({"target": "cuda"}, "target 'cuda' is not available here"),
        ({"problem": example("nonexistent", "problem")}, "problem: file not found"),
        ({"problem": "/nonexistent/problem.py"}, "problem: /nonexistent/problem.py is outside the allowed directories"),
        ({"device": "cuda:3"}, "device 'cuda:3' is not available"),
        ({"trials": 0}, "trials"),
    ],
)
async def test_bad_input_is_a_clear_tool_error(server, args, expected):
    base = {"problem": SOFTMAX, "candidate": example("row_softmax", "triton"), "target": "triton", **FAST}
    result = await call(server, "verify", {**base, **args})
    assert result.is_error
    assert expected in result.content[0].text


async def test_compile_reports_kernel_resources_and_caches(server):
    args = {"target": "triton", "source": example("gemm_bias_relu", "triton"), "problem": problem("gemm_bias_relu")}
    first = (await call(server, "compile", args)).structured_content
    assert first["ok"] and first["signature_source"] == "traced" and first["arch"] == "sm_90a"
    kernel = first["kernels"][0]
    assert kernel["name"] == "linear_relu_kernel" and kernel["registers"] > 0 and kernel["shared_bytes"] > 0
    assert kernel["signature"]["x_ptr"] == "*fp32" and kernel["constexprs"]["BLOCK_K"] == "32"
    second = (await call(server, "compile", args)).structured_content
    assert second["cached"] and second["seconds"] < 0.5 and second["kernels"] == first["kernels"]


async def test_compile_without_problem_infers_signatures(server):
    result = await call(
        server, "compile", {"target": "triton", "source": hostile("with_defaults"), "arch": "sm_80", "emit_ptx": True}
    )
    report = result.structured_content
    assert report["ok"] and report["signature_source"] == "inferred" and report["arch"] == "sm_80"
    assert report["kernels"][0]["signature"] == {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    assert ".target sm_80" in report["ptx"]["silu_kernel"]
    assert [k["name"] for k in report["kernels"]] == ["silu_kernel", "needs_block"]
    guessed = [d for d in report["diagnostics"] if d["kernel"] == "needs_block"]
    assert guessed[0]["severity"] == "note" and "compiled with 64" in guessed[0]["message"]


async def test_compile_error_points_at_the_line(server):
    report = (
        await call(server, "compile", {"target": "triton", "source": hostile("compile_error")})
    ).structured_content
    assert not report["ok"]
    d = report["diagnostics"][0]
    assert d["line"] == 13 and d["severity"] == "error" and "undefined_scale" in d["message"]
    assert d["column"] and d["file"].endswith("compile_error.py")


async def test_compile_error_in_helper_points_at_helper_and_call(server):
    report = (await call(server, "compile", {"target": "triton", "source": hostile("helper_error")})).structured_content
    assert not report["ok"]
    lines = {(d["severity"], d["line"]) for d in report["diagnostics"]}
    assert ("error", 10) in lines and ("note", 17) in lines


async def test_compile_takes_constexprs_from_the_launch_site(server):
    report = (
        await call(server, "compile", {"target": "triton", "source": example("fused_bias_gelu", "triton")})
    ).structured_content
    assert report["ok"] and report["kernels"][0]["constexprs"] == {"BLOCK": "4096"}


async def test_compile_syntax_error_is_a_diagnostic(server):
    report = (await call(server, "compile", {"target": "triton", "source": hostile("syntax_error")})).structured_content
    assert not report["ok"] and report["diagnostics"][0]["line"] == 5


async def test_compile_rejects_a_bad_arch(server):
    result = await call(
        server, "compile", {"target": "triton", "source": example("row_softmax", "triton"), "arch": "gfx90a"}
    )
    assert result.is_error and "not an NVIDIA arch" in result.content[0].text


@pytest.mark.slow
async def test_long_call_returns_a_job_that_can_be_followed(server):
    async with Client(server) as client:
        started = await client.call_tool(
            "verify",
            {
                "problem": SOFTMAX,
                "candidate": example("row_softmax", "triton"),
                "target": "triton",
                "wait_s": 0,
                **FAST,
            },
        )
        assert started.structured_content["status"] == "running"
        job_id = started.structured_content["job_id"]
        status = (await client.call_tool("job_status", {"job_id": job_id})).structured_content
        assert status["status"] in ("queued", "running", "done") and status["tool"] == "verify"
        done = (await client.call_tool("job_result", {"job_id": job_id, "wait_s": 50})).structured_content
    assert done["status"] == "done" and done["result"]["verdict"] == "pass"


@pytest.mark.slow
async def test_cancel_kills_the_job_and_the_server_keeps_serving(server):
    async with Client(server) as client:
        started = await client.call_tool(
            "verify", {"problem": SOFTMAX, "candidate": hostile("hang"), "target": "triton", "wait_s": 0, **FAST}
        )
        job_id = started.structured_content["job_id"]
        time.sleep(1)
        cancelled = (await client.call_tool("job_cancel", {"job_id": job_id})).structured_content
        assert cancelled["status"] == "cancelled"
        again = await client.call_tool(
            "verify", {"problem": SOFTMAX, "candidate": example("row_softmax", "triton"), "target": "triton", **FAST}
        )
    assert again.structured_content["verdict"] == "pass"


async def test_unknown_job_is_a_tool_error(server):
    result = await call(server, "job_result", {"job_id": "nope"})
    assert result.is_error and "unknown job_id" in result.content[0].text


@pytest.mark.slow
async def test_progress_is_reported_before_the_result(server):
    seen = []

    async def on_progress(progress, total, message):
        seen.append(message)

    result = await call(
        server,
        "verify",
        {"problem": SOFTMAX, "candidate": example("row_softmax", "triton"), "target": "triton", **FAST},
        progress_callback=on_progress,
    )
    assert result.structured_content["verdict"] == "pass"
    assert any(m and "correctness trial" in m for m in seen)
