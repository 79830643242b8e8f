"""profile and analyze_profile end to end through a real MCP client (CPU: the Triton interpreter)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from conftest import example, problem
from mcp import Client

pytestmark = pytest.mark.anyio
DATA = Path(__file__).resolve().parent / "data" / "profiles"


async def call(server, name, args):
    async with Client(server) as client:
        return await client.call_tool(name, args)


@pytest.mark.slow
async def test_profile_gemm_on_cpu_has_roofline_and_cpu_ops(server):
    result = await call(
        server,
        "profile",
        {
            "problem": problem("gemm_bias_relu"),
            "target": "triton",
            "candidate": example("gemm_bias_relu", "triton"),
            "device": "cpu",  # the interpreter's path, also on a GPU machine
            "iterations": 1,
            "depth": "metrics",
        },
    )
    assert not result.is_error, result.content
    r = result.structured_content
    assert r["source"] == "torch.profiler" and r["device"] == "cpu" and r["execution"] == "triton-interpreter"
    assert r["kernels"] and all(k["kind"] == "cpu" for k in r["kernels"])
    assert any("no device kernels" in n for n in r["notes"]) and any(
        "ncu" in n.lower() or "Nsight" in n for n in r["notes"]
    )
    roof = r["roofline"]
    assert roof["flops"] == 2 * 256 * 512 * 384 and roof["bytes"] > 0 and roof["sol_ms"] > 0
    assert roof["bound"] in ("memory", "compute") and roof["fraction_of_sol"] is not None
    # the trace linked (tests/test_artifacts.py reads it) and the roofline drawn for the host
    assert [c.type for c in result.content] == ["text", "resource_link", "image"]

    advice = await call(server, "analyze_profile", {"profile": r})
    assert not advice.is_error and "no device kernels" in advice.structured_content["summary"]


async def test_profile_reference_without_candidate(server):
    args = {"problem": problem("row_softmax"), "target": "triton", "device": "cpu", "iterations": 2}
    result = await call(server, "profile", args)  # CPU ops of the reference, also on a GPU machine
    r = result.structured_content
    assert not result.is_error and r["target"] == "reference" and r["roofline"]["bound"] == "memory"
    assert any(k["name"] == "aten::softmax" for k in r["kernels"])
    # the roofline drawn for hosts that show images, after the report's summary as text
    images = [c for c in result.content if c.type == "image"]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    png = base64.b64decode(images[0].data)
    assert png.startswith(b"\x89PNG") and 5_000 < len(png) < 512 * 1024
    text = result.content[0].text
    assert f"bound {r['roofline']['sol_ms']:.4g} ms" in text and "aten::softmax" in text and "null" not in text


async def test_analyze_profile_on_a_real_ncu_csv(server):
    result = await call(
        server,
        "analyze_profile",
        {"path": str(DATA / "fused_bias_gelu-triton_naive.ncu-raw.csv"), "problem": problem("fused_bias_gelu")},
    )
    assert not result.is_error, result.content
    a = result.structured_content
    top = a["recommendations"][0]
    assert top["rule"] == "fuse_launches" and top["priority"] == "high" and top["expected_gain"] > 0.5
    assert top["evidence"] and top["action"] and a["summary"]
    assert a["roofline"]["device"] == "H100 SXM" and a["roofline"]["bound"] == "memory"
    assert a["roofline"]["bytes"] == pytest.approx((512 * 1024 * 2 + 1024) * 4)


async def test_analyze_profile_bad_inputs_are_tool_errors(server, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    result = await call(server, "analyze_profile", {"path": str(bad)})
    assert result.is_error and "bad.json" in result.content[0].text and "truncated" in result.content[0].text
    both = await call(server, "analyze_profile", {"path": str(bad), "image": str(bad)})
    assert both.is_error and "exactly one" in both.content[0].text
    img = tmp_path / "shot.png"
    img.write_bytes(b"\x89PNG")
    shot = await call(server, "analyze_profile", {"image": str(img)})
    assert not shot.is_error and "LLM" in shot.structured_content["summary"]


async def test_bad_profiles_name_the_file_and_the_server_keeps_serving(server, tmp_path):
    cases = {
        "empty.json": ('{"traceEvents": []}', "nothing was profiled"),
        "foreign.csv": ("name,value\nfoo,1\n", "unrecognized profile format"),
        "cut.csv": ('"ID","Process ID","Kernel Name"\n', "truncated"),
    }
    async with Client(server) as client:
        for name, (text, why) in cases.items():
            (tmp_path / name).write_text(text)
            result = await client.call_tool("analyze_profile", {"path": str(tmp_path / name)})
            assert result.is_error and str(tmp_path / name) in result.content[0].text and why in result.content[0].text
        ok = await client.call_tool("analyze_profile", {"path": str(DATA / "fused_bias_gelu-triton_naive.ncu-raw.csv")})
        assert not ok.is_error and ok.structured_content["recommendations"][0]["rule"] == "fuse_launches"


def test_plots_drawn_on_several_threads_at_once_all_draw(tmp_path):
    """A host reads a run's plot and its roofline at once, each drawn on a worker thread; matplotlib's
    mathtext parser (log-scale tick labels) is shared and not thread-safe: without the drawing lock 47
    of 48 such draws raised ParseException (a CI run's Apps view lost its plot to it)."""
    import threading

    from kforge_mcp.advice.roofline_plot import draw_roofline
    from kforge_mcp.core.schemas import Roofline

    roofs = [
        Roofline(
            flops=0, bytes=4.2e6, device="CPU", peak_flops=1e11, peak_bandwidth=5e10, sol_ms=0.084, measured_ms=33
        ),
        Roofline(
            flops=2e9, bytes=4.2e6, device="GPU", peak_flops=1e14, peak_bandwidth=3e12, sol_ms=0.02, measured_ms=0.5
        ),
    ]
    errors = []

    def draw(i: int) -> None:
        for j in range(3):
            try:
                draw_roofline(roofs[(i + j) % 2], tmp_path / f"{i}-{j}.png")
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e)[:200])

    threads = [threading.Thread(target=draw, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(list(tmp_path.glob("*.png"))) == 18


async def test_a_profile_that_outlived_wait_s_comes_back_whole_and_analyzes_from_its_wrapper(server):
    """job_result gives a profile job's result with what the profile tool gives in time (its roofline drawn), and
    analyze_profile takes job_result's wrapper as the profile once the job is done, a running one refused."""
    args = {"problem": problem("row_softmax"), "target": "triton", "device": "cpu", "iterations": 1, "wait_s": 0}
    async with Client(server) as client:
        started = (await client.call_tool("profile", args)).structured_content
        running = await client.call_tool("analyze_profile", {"profile": started, "problem": problem("row_softmax")})
        assert running.is_error and f"job {started['job_id']}" in running.content[0].text
        done = await client.call_tool("job_result", {"job_id": started["job_id"], "wait_s": 50})
        wrapper = done.structured_content
        assert wrapper["status"] == "done" and "image" in [c.type for c in done.content]
        advice = await client.call_tool("analyze_profile", {"profile": wrapper, "problem": problem("row_softmax")})
    assert not advice.is_error, advice.content[0].text
    assert advice.structured_content["roofline"]["device"] == "CPU (generic)"


async def test_a_problems_roofline_is_never_for_a_guessed_device(server):
    """A profile that names no device gets no roofline from a guess: device_model says which, or the call says why."""
    report = {"source": "torch.profiler", "kernels": [{"name": "k", "device_ms": 1.0, "launches": 1}]}
    guessed = await call(server, "analyze_profile", {"profile": report, "problem": problem("row_softmax")})
    assert guessed.is_error and "device_model" in guessed.content[0].text
    named = await call(
        server, "analyze_profile", {"profile": report, "problem": problem("row_softmax"), "device_model": "h200"}
    )
    assert not named.is_error and named.structured_content["roofline"]["device"] == "H200"
    unknown = await call(
        server, "analyze_profile", {"profile": report, "problem": problem("row_softmax"), "device_model": "tpu"}
    )
    assert unknown.is_error and "not in the peaks table" in unknown.content[0].text
