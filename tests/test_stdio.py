"""The real server as a host starts it: `kforge-mcp` over stdio, driven by the SDK's client."""

from __future__ import annotations

import os
import sys

import pytest
from conftest import ROOT, example, problem
from mcp import Client, StdioServerParameters

pytestmark = pytest.mark.anyio


@pytest.mark.slow
async def test_stdio_server_serves_every_tool(tmp_path):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "kforge_mcp.cli", "serve"],
        env={**os.environ, "KFORGE_HOME": str(tmp_path)},
        cwd=str(ROOT),
    )
    async with Client(params, mode="legacy") as client:
        assert client.server_info.name == "kforge"
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
        targets = (await client.call_tool("list_targets", {})).structured_content["targets"]
        assert next(t for t in targets if t["name"] == "triton")["available"]
        crash = await client.call_tool(
            "verify",
            {
                "problem": problem("fused_bias_gelu"),
                "target": "triton",
                "candidate": example("fused_bias_gelu", "triton_crash"),
                "baselines": ["eager"],
                "trials": 1,
            },
        )
        assert crash.structured_content["verdict"] == "error"
        ok = await client.call_tool(
            "verify",
            {
                "problem": problem("row_softmax"),
                "target": "triton",
                "candidate": example("row_softmax", "triton"),
                "baselines": ["eager"],
                "trials": 1,
            },
        )
        assert ok.structured_content["verdict"] == "pass"
        bad = await client.call_tool(
            "verify",
            {"problem": problem("row_softmax"), "target": "nope", "candidate": example("row_softmax", "triton")},
        )
        assert bad.is_error and "unknown target" in bad.content[0].text
