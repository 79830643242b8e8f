"""Files a tool made, through the SDK's real client: compile's PTX and profile's chrome trace come
as resource links, are listed among the resource templates, and read back whole; a bad artifact
URI is invalid params (-32602)."""

from __future__ import annotations

import json

import pytest
from conftest import example, problem
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from kforge_mcp.profiling.torch_trace import FORWARD_MARK

pytestmark = pytest.mark.anyio
TEMPLATE = "kforge://artifacts/{digest}/{name}"


def links(result) -> dict:
    return {c.name: c for c in result.content if c.type == "resource_link"}


async def test_compile_links_each_kernels_ptx(server):
    async with Client(server) as client:
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert TEMPLATE in templates
        result = await client.call_tool(
            "compile",
            {"target": "triton", "source": example("fused_bias_gelu", "triton"), "emit_ptx": True, "wait_s": 600},
        )
        assert result.structured_content["ok"], result.content
        ptx = result.structured_content["ptx"]
        found = links(result)
        assert len(found) == len(ptx) >= 1 and all(name.endswith(".ptx") for name in found), found
        for kernel, text in ptx.items():
            link = next(v for k, v in found.items() if k.startswith(kernel.split()[0]))
            read = (await client.read_resource(link.uri)).contents[0]
            assert read.text == text and ".entry" in text  # the whole PTX, as the report has it
        plain = await client.call_tool(
            "compile", {"target": "triton", "source": example("fused_bias_gelu", "triton"), "wait_s": 600}
        )
        assert not links(plain)  # no PTX asked for: nothing to link


async def test_profile_links_the_profilers_own_trace(server):
    args = {"problem": problem("fused_bias_gelu"), "candidate": example("fused_bias_gelu", "triton")}
    async with Client(server) as client:
        result = await client.call_tool("profile", {**args, "target": "triton", "iterations": 2, "wait_s": 600})
        assert not result.structured_content["errors"], result.structured_content
        assert "raw" not in result.structured_content  # the file is linked, not inlined
        trace = links(result)["trace.json"]
        assert trace.mime_type == "application/json"
        events = json.loads((await client.read_resource(trace.uri)).contents[0].text)["traceEvents"]
    assert sum(e.get("name") == FORWARD_MARK for e in events) == 2  # one mark per profiled forward


@pytest.mark.parametrize("uri", ["kforge://artifacts/0123456789abcdef/nope.ptx", "kforge://artifacts/..%2F..%2Fx/y"])
async def test_an_unknown_artifact_is_invalid_params(server, uri):
    async with Client(server) as client:
        with pytest.raises(MCPError) as e:
            await client.read_resource(uri)
    assert e.value.error.code == INVALID_PARAMS, e.value.error
