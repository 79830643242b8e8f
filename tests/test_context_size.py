"""What an agent's context pays for kforge, through the real server and the SDK's client: tools/list within
30,000 characters with every argument still described, output schemas the results validate against, and
results whose text is a summary a model reads (the structured content keeps every field)."""

from __future__ import annotations

import json

import pytest
from conftest import example, problem
from mcp import Client

from kforge_mcp.core.options import VerifyCall
from kforge_mcp.tools.schemas import compact_output

pytestmark = pytest.mark.anyio

GELU = problem("fused_bias_gelu")
QUICK = {"trials": 1, "baselines": ["eager"], "wait_s": 600}


def size(value) -> int:
    return len(json.dumps(value, separators=(",", ":")))


def text_of(result) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


async def test_tools_list_fits_in_30000_characters_and_keeps_every_description(server):
    async with Client(server) as client:
        listed = await client.list_tools()
    wire = listed.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert size(wire) <= 30_000, {t["name"]: size(t) for t in wire["tools"]}
    for tool in wire["tools"]:
        assert tool["description"] and not tool["description"].startswith(" "), tool["name"]
        for name, prop in tool["inputSchema"]["properties"].items():
            assert prop.get("description") and "title" not in prop, (tool["name"], name)
        assert "description" not in json.dumps(tool.get("outputSchema", {})), tool["name"]
    verify = next(t for t in wire["tools"] if t["name"] == "verify")
    # the schema is the model's: every field, with its bounds and default
    assert set(verify["inputSchema"]["properties"]) == set(VerifyCall.model_fields) | {"wait_s"}
    trials = verify["inputSchema"]["properties"]["trials"]
    assert (trials["minimum"], trials["maximum"], trials["default"]) == (1, 100, 5)
    assert set(verify["outputSchema"]["properties"]) >= {"verdict", "speedup", "timing", "findings", "errors"}


def test_an_output_schema_keeps_the_nearest_objects_that_fit_and_types_the_rest_as_objects():
    schema = {
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/A", "description": "the first", "title": "A"},
            "b": {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "null"}], "default": None},
        },
        "$defs": {
            "A": {"type": "object", "properties": {"x": {"type": "integer", "default": 0}}},
            "B": {"type": "object", "properties": {"long": {"type": "string", "description": "y" * 500}}},
        },
    }
    small = compact_output(schema, budget=200)
    assert small["$defs"] == {"A": {"type": "object", "properties": {"x": {"type": "integer"}}}}
    assert small["properties"] == {"a": {"$ref": "#/$defs/A"}, "b": {"type": ["object", "null"]}}
    whole = compact_output(schema, budget=10_000)
    assert set(whole["$defs"]) == {"A", "B"} and "description" not in json.dumps(whole)


async def test_a_verify_result_reads_as_a_summary_and_keeps_every_field_structured(server):
    async with Client(server) as client:
        good = await client.call_tool(
            "verify", {"problem": GELU, "candidate": example("fused_bias_gelu", "triton"), "target": "triton", **QUICK}
        )
        wrong = await client.call_tool(
            "verify",
            {"problem": GELU, "candidate": example("fused_bias_gelu", "triton_wrong"), "target": "triton", **QUICK},
        )
    for result in (good, wrong):
        text, structured = text_of(result), result.structured_content
        assert len(text) <= 3_000 and "null" not in text and not text.lstrip().startswith("{"), text
        assert text.startswith(f"verdict: {structured['verdict']}") and f"seed {structured['seed']}" in text
        assert set(structured) >= {"verdict", "timing", "phases", "device_state", "seconds"}  # every field
    assert good.structured_content["verdict"] == "pass" and f"{good.structured_content['speedup']:.3g}x" in text_of(
        good
    )
    first = wrong.structured_content["mismatches"][0]
    assert wrong.structured_content["verdict"] == "fail" and f"trial {first['trial']}" in text_of(wrong)


async def test_a_profile_result_reads_as_a_summary_of_its_kernels_and_bound(server):
    async with Client(server) as client:
        result = await client.call_tool(
            "profile",
            {"problem": GELU, "candidate": example("fused_bias_gelu", "triton"), "target": "triton", "wait_s": 600},
        )
        analysis = await client.call_tool("analyze_profile", {"profile": result.structured_content})
    text, report = text_of(result), result.structured_content
    assert len(text) <= 4_000 and "null" not in text, text
    assert report["kernels"] and max(report["kernels"], key=lambda k: k["device_ms"])["name"][:60] in text
    assert f"bound {report['roofline']['sol_ms']:.4g} ms" in text
    summary = analysis.structured_content["summary"]
    assert len(text_of(analysis)) <= 3_000 and summary[:80] in text_of(analysis)
