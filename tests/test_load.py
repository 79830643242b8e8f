"""Concurrent tool calls over streamable HTTP: a real `kforge serve --transport http` subprocess and several
SDK clients firing 20 calls at once (list_targets, compile, analyze_profile; no verify). Every call
completes, the server keeps serving, and the memory of the server and its workers stays bounded. The full
run with verify and the recorded figures is `python bench/load_http.py` (bench/results/load-http/cpu.md)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from conftest import ROOT, example, problem
from http_server import MemorySampler, ServerProcess

HEADROOM_MB = 1024.0  # what a burst may add over the warm server (parsing, job threads, torch tensors)
PROFILES = ROOT / "tests" / "data" / "profiles"
CALLS = [
    ("list_targets", {}),
    ("compile", {"target": "triton", "source": example("row_softmax", "triton"), "problem": problem("row_softmax")}),
    ("list_targets", {}),
    ("analyze_profile", {"path": str(PROFILES / "fused_bias_gelu-triton.ncu-raw.csv")}),
    (
        "compile",
        {
            "target": "triton",
            "source": example("fused_bias_gelu", "triton_naive"),
            "problem": problem("fused_bias_gelu"),
        },
    ),
    ("analyze_profile", {"path": str(PROFILES / "fused_bias_gelu-reference.torch-trace.json")}),
]


async def burst(server: ServerProcess, clients: int, calls: int) -> list[str]:
    """``calls`` calls at once over ``clients`` sessions; the errors, as text."""
    async with contextlib.AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(server.client()) for _ in range(clients)]
        await sessions[0].call_tool("list_targets", {})  # a warm server: the compile worker is up

        async def call(i: int) -> str | None:
            tool, args = CALLS[i % len(CALLS)]
            try:
                result = await sessions[i % clients].call_tool(tool, args)
            except Exception as e:  # noqa: BLE001  (a transport failure is what this test looks for)
                return f"{tool}: {type(e).__name__}: {e}"
            if result.is_error or (tool == "compile" and not result.structured_content["ok"]):
                return f"{tool}: {result.content[0].text[:300]}"
            return None

        errors = await asyncio.gather(*(call(i) for i in range(calls)))
        still_serving = not (await sessions[-1].call_tool("list_targets", {})).is_error
    return [e for e in errors if e] + ([] if still_serving else ["list_targets after the burst failed"])


@pytest.mark.slow
def test_concurrent_calls_from_several_clients_complete_and_the_server_keeps_serving(tmp_path):
    server = ServerProcess(tmp_path / "home").start()
    sampler = MemorySampler(server.proc.pid).start()
    try:
        asyncio.run(burst(server, clients=1, calls=1))
        time.sleep(1.0)
        baseline = sampler.peak_between(time.monotonic() - 0.5, time.monotonic())
        t0 = time.monotonic()
        errors = asyncio.run(burst(server, clients=4, calls=20))
        peak = sampler.peak_between(t0, time.monotonic())
        assert server.proc.poll() is None, server.log_tail()
    finally:
        sampler.stop()
        server.stop()
    assert not errors, errors
    # bounded: the burst adds little over the warm server (only the compile worker runs here)
    assert peak["tree_mb"] < baseline["tree_mb"] + HEADROOM_MB, (baseline, peak)
