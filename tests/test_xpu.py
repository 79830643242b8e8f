"""Triton on Intel XPU: without one, list_targets says what is missing and verify / profile on
device 'xpu' fail with the reason (through a real MCP client); device routing is declarative.
Marked `xpu`: the examples on an Intel GPU (pytest -m xpu on a machine with one)."""

from __future__ import annotations

import pytest
import torch
from conftest import example, problem
from mcp import Client

from kforge_mcp.judge.timing import _device_api
from kforge_mcp.targets import get_target
from kforge_mcp.targets.base import device_resource, xpu_unavailable_reason

HAS_XPU = hasattr(torch, "xpu") and torch.xpu.is_available()
XPU_REASON = "needs an Intel GPU with the XPU build of torch"
EXAMPLES = ["fused_bias_gelu", "row_softmax", "gemm_bias_relu"]


def test_device_resources_for_routing():
    assert [device_resource(d) for d in ("cuda:1", "xpu:0", "mps", "cpu", None)] == ["cuda", "xpu", "metal", None, None]
    assert get_target("metal").requires == "metal"


def test_xpu_timing_binds_torch_xpu_events():
    api, event, sync = _device_api("xpu:0")
    assert api is torch.xpu and event is torch.xpu.Event and sync is torch.xpu.synchronize


@pytest.mark.skipif(HAS_XPU, reason="checks the behaviour without an Intel GPU")
def test_triton_probe_lists_xpu_as_missing_with_the_reason():
    status = get_target("triton").probe(["cpu"])
    assert status.available and status.devices == ["cpu"]
    assert status.unavailable_devices["xpu"].startswith(XPU_REASON)
    assert xpu_unavailable_reason() == status.unavailable_devices["xpu"]
    assert (
        "not an XPU build" in status.unavailable_devices["xpu"]
        or "is_available() is False" in status.unavailable_devices["xpu"]
    )


@pytest.mark.skipif(HAS_XPU, reason="checks the behaviour without an Intel GPU")
@pytest.mark.anyio
async def test_verify_and_profile_on_xpu_say_what_is_needed(server):
    args = {
        "problem": problem("row_softmax"),
        "candidate": example("row_softmax", "triton"),
        "target": "triton",
        "device": "xpu",
        "wait_s": 600,
    }
    async with Client(server) as client:
        listed = await client.call_tool("list_targets", {})
        verified = await client.call_tool("verify", args)
        profiled = await client.call_tool("profile", args)
    triton = next(t for t in listed.structured_content["targets"] if t["name"] == "triton")
    assert XPU_REASON in triton["unavailable_devices"]["xpu"]
    for result in (verified, profiled):
        assert result.is_error
        assert f"device 'xpu:0' is not available to target 'triton' here: {XPU_REASON}" in result.content[0].text


@pytest.mark.xpu
@pytest.mark.skipif(not HAS_XPU, reason=XPU_REASON)
@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_pass_on_an_intel_gpu(engine, name):
    report = engine.verify(problem(name), example(name, "triton"), target="triton", device="xpu", baselines=["eager"])
    assert report.verdict == "pass", report
    assert report.execution == "xpu" and report.timing.candidate.clock.startswith("xpu events")


@pytest.mark.xpu
@pytest.mark.skipif(not HAS_XPU, reason=XPU_REASON)
def test_profile_on_an_intel_gpu_sees_the_kernels(engine):
    report = engine.profile(
        problem("row_softmax"), example("row_softmax", "triton_naive"), target="triton", device="xpu"
    )
    assert not report.errors and report.device_kernels() and report.launches_per_forward == 3
