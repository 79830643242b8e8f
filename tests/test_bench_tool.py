"""The bench tool through the SDK's real client: a suite judged on the Triton interpreter, its
scores as structured content, and its plot (best speedup per problem, the fast_p curve) as a PNG."""

from __future__ import annotations

import base64
import json
import shutil
import struct

import pytest
from conftest import EXAMPLES
from mcp import Client

pytestmark = pytest.mark.anyio
GELU = EXAMPLES / "candidates" / "fused_bias_gelu"


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk; fails on anything that is not a PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and data.endswith(b"IEND\xaeB`\x82")
    return struct.unpack(">II", data[16:24])


async def test_bench_scores_a_suite_and_shows_its_fast_p_plot(server, tmp_path):
    (tmp_path / "problems").mkdir()
    shutil.copyfile(EXAMPLES / "problems" / "fused_bias_gelu.py", tmp_path / "problems" / "fused_bias_gelu.py")
    for name in ("triton", "triton_wrong"):
        (tmp_path / "cands" / "fused_bias_gelu").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(GELU / f"{name}.py", tmp_path / "cands" / "fused_bias_gelu" / f"{name}.py")
    args = {"problems": str(tmp_path / "problems"), "candidates": str(tmp_path / "cands"), "wait_s": 600}
    async with Client(server) as client:
        result = await client.call_tool("bench", {**args, "trials": 1, "baselines": ["eager"]})
    assert not result.is_error, result.content
    suite = result.structured_content["bench"]["suite"]
    assert (suite["problems"], suite["correct"], suite["candidates_judged"]) == (1, 1, 2)
    assert suite["fast_p"]["0"] == 1.0 and suite["fast_p"]["1"] == 0.0  # the interpreter is never faster
    text = result.content[0].text  # a summary of the scores, not the JSON again
    assert text.startswith("bench of 1 problems on triton") and "1 correct (100%)" in text and "fast_1 0%" in text
    images = [c for c in result.content if c.type == "image"]
    assert len(images) == 1 and images[0].mime_type == "image/png", result.content
    width, height = png_size(base64.b64decode(images[0].data))
    assert width > 400 and height > 200
    links = {c.name: c.uri for c in result.content if c.type == "resource_link"}
    assert set(links) == {"summary.json", "bench.html"}, result.content
    async with Client(server) as client:
        kept = json.loads((await client.read_resource(links["summary.json"])).contents[0].text)
        page = (await client.read_resource(links["bench.html"])).contents[0].text
    assert kept["suite"] == suite and "fused_bias_gelu" in page


async def test_bench_lists_no_folder_outside_the_allowed_ones(server, tmp_path):
    async with Client(server) as client:
        result = await client.call_tool("bench", {"problems": "/etc", "candidates": str(tmp_path), "wait_s": 60})
    assert result.is_error and "outside the allowed directories" in result.content[0].text, result.content
