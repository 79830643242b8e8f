"""The MCP protocol as hosts speak it, through the SDK's real client: completions, closed values as
enums, progress, run subscriptions, both protocol versions (2025-11-25 with its handshake, 2026-07-28
stateless), and bad input over stdio and HTTP answered with the spec's codes while the server serves on."""

from __future__ import annotations

import base64
import json
import os
import queue
import subprocess
import sys
import threading
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from conftest import ROOT, example, problem
from http_server import ServerProcess
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PromptReference,
    ResourceTemplateReference,
    ResourceUpdatedNotification,
)

from kforge_mcp.store import RunStore
from kforge_mcp.targets import TARGETS

# the 2025-11-25 subscribe verbs are tested on purpose
pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")]

KFORGE_MCP = Path(sys.executable).parent / "kforge-mcp"
MODES = ["legacy", "2026-07-28"]  # the 2025-11-25 handshake; the stateless 2026-07-28 protocol
VERIFY = {
    "problem": problem("row_softmax"),
    "candidate": example("row_softmax", "triton"),
    "target": "triton",
    "baselines": ["eager"],
    "trials": 2,
    "wait_s": 600,
}


# ---- in-process: completions, schemas, subscriptions ----


@pytest.mark.parametrize("mode", MODES)
async def test_completions_offer_targets_devices_paths_and_run_ids(server, engine, mode):
    run = RunStore.for_home(engine.home).create_run(problem="x", target="triton", provider="client")
    write = PromptReference(name="write_kernel")
    async with Client(server, mode=mode) as client:
        targets = (await client.complete(write, {"name": "target", "value": ""})).completion
        assert targets.values == list(TARGETS) and targets.total == len(TARGETS)
        assert (await client.complete(write, {"name": "target", "value": "tr"})).completion.values == ["triton"]
        devices = (await client.complete(write, {"name": "device", "value": ""})).completion.values
        assert "cpu" in devices
        typed = str(ROOT / "examples" / "prob")
        paths = (await client.complete(write, {"name": "problem", "value": typed})).completion.values
        assert paths == [str(ROOT / "examples" / "problems") + os.sep]
        files = (await client.complete(write, {"name": "problem", "value": paths[0] + "row"})).completion.values
        assert files == [problem("row_softmax")]
        template = ResourceTemplateReference(uri="kforge://runs/{run_id}")
        ids = (await client.complete(template, {"name": "run_id", "value": run.id[:4]})).completion.values
        assert run.id in ids and all(i.startswith(run.id[:4]) for i in ids)
        with pytest.raises(MCPError) as raised:
            await client.complete(PromptReference(name="no_such_prompt"), {"name": "target", "value": ""})
        assert raised.value.code == INVALID_PARAMS


async def test_closed_values_are_enums_in_the_input_schemas(server):
    async with Client(server) as client:
        tools = {t.name: t.input_schema for t in (await client.list_tools()).tools}
    for name in ("compile", "verify", "profile", "run_loop", "loop_start", "verify_batch"):
        assert tools[name]["properties"]["target"]["enum"] == list(TARGETS), name
    assert tools["profile"]["properties"]["depth"]["enum"] == ["timeline", "metrics"]
    for name in ("verify", "verify_batch", "run_loop", "loop_start"):
        assert tools[name]["properties"]["baselines"]["items"]["enum"] == ["eager", "compiled"], name
    item = tools["verify_batch"]["$defs"]["BatchItem"]["properties"]["target"]
    assert item["enum"] == [*TARGETS, None]


async def test_an_unknown_target_is_still_named_in_the_error(server):
    async with Client(server) as client:
        bad = await client.call_tool("compile", {"target": "nope", "source": example("row_softmax", "triton")})
    assert bad.is_error and "unknown target 'nope'" in bad.content[0].text


async def wait_until(predicate, timeout_s: float = 10.0):
    with anyio.fail_after(timeout_s):
        while not predicate():
            await anyio.sleep(0.05)


async def next_event_while_changing(events, store, run_id: str, timeout_s: float = 20.0):
    """The first event of a listen stream, changing the run every half second until it comes: the
    watcher's first look at the store (its baseline) may come late on a loaded machine."""
    async with anyio.create_task_group() as tg:

        async def change():
            for i in range(int(timeout_s * 2)):
                store.update_run(run_id, status=("done", "stopped")[i % 2])
                await anyio.sleep(0.5)

        tg.start_soon(change)
        with anyio.fail_after(timeout_s):
            event = await events.__anext__()
        tg.cancel_scope.cancel()
    return event


async def test_a_2025_client_subscribed_to_a_run_hears_when_it_changes(server, engine):
    store = RunStore.for_home(engine.home)
    run, other = (store.create_run(problem="x", target="triton", provider="client") for _ in range(2))
    heard = []

    async def on_message(message):
        if isinstance(message, ResourceUpdatedNotification):
            heard.append(message.params.uri)

    async with Client(server, mode="legacy", message_handler=on_message) as client:
        assert client.server_capabilities.resources.subscribe
        await client.subscribe_resource(f"kforge://runs/{run.id}/best")
        for uri in ("kforge://runs/no-such-run", "kforge://elsewhere"):
            with pytest.raises(MCPError) as raised:
                await client.subscribe_resource(uri)
            assert raised.value.code == INVALID_PARAMS
        store.update_run(other.id, status="done")  # not subscribed: not heard
        store.update_run(run.id, status="done")
        await wait_until(lambda: heard)
        assert heard == [f"kforge://runs/{run.id}/best"]
        await client.unsubscribe_resource(f"kforge://runs/{run.id}/best")
        store.update_run(run.id, status="stopped")
        await anyio.sleep(2.5)  # two polls
        assert len(heard) == 1


async def test_a_subscriber_hears_when_only_the_advice_of_a_run_changes(server, engine):
    store = RunStore.for_home(engine.home)
    run = store.create_run(problem="x", target="triton", provider="client")
    store.add_attempt(run.id, "functional", candidate="class ModelNew: ...", speedup=1.2, correct=True)
    heard = []

    async def on_message(message):
        if isinstance(message, ResourceUpdatedNotification):
            heard.append(message.params.uri)

    async with Client(server, mode="legacy", message_handler=on_message) as client:
        await client.subscribe_resource(f"kforge://runs/{run.id}")
        await anyio.sleep(1.5)  # a poll with nothing new: nothing heard
        assert heard == []
        store.set_recommendations(run.id, 0, [{"title": "fuse the epilogue"}])  # no status, no new attempt
        await wait_until(lambda: heard)
    assert heard == [f"kforge://runs/{run.id}"]


async def test_a_2026_client_listening_to_a_run_hears_when_it_changes(server, engine):
    store = RunStore.for_home(engine.home)
    run = store.create_run(problem="x", target="triton", provider="client")
    uri = f"kforge://runs/{run.id}"
    async with Client(server, mode="2026-07-28") as client:
        assert client.protocol_version == "2026-07-28"
        async with client.listen(resource_subscriptions=[uri]) as events:
            event = await next_event_while_changing(events, store, run.id)
    assert event.uri == uri


# ---- over the wire: stdio and streamable HTTP ----


def check_progress(seen: list[tuple[float, float | None, str | None]], wait_s: float) -> None:
    values = [p for p, _, _ in seen]
    assert len(values) >= 3, seen
    assert all(b > a for a, b in zip(values, values[1:])), values  # the spec: each above the last
    assert all(total == wait_s for _, total, _ in seen), seen
    assert all(message for _, _, message in seen), seen
    assert any("correctness trial" in m for _, _, m in seen), seen


async def verify_with_progress(client) -> None:
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))

    result = await client.call_tool("verify", VERIFY, progress_callback=on_progress)
    assert result.structured_content["verdict"] == "pass", result.content
    check_progress(seen, VERIFY["wait_s"])


@pytest.mark.slow
async def test_stdio_progress_increases_with_a_total_and_a_message(tmp_path):
    params = StdioServerParameters(
        command=str(KFORGE_MCP),
        args=["--allow-dir", str(ROOT)],
        env={**os.environ, "KFORGE_HOME": str(tmp_path / "home")},
        cwd=str(tmp_path),
    )
    async with Client(params, mode="legacy") as client:
        await verify_with_progress(client)


@pytest.fixture(scope="module")
def http_server(tmp_path_factory):
    home = tmp_path_factory.mktemp("http") / "home"
    server = ServerProcess(home).start()
    yield server
    server.stop()


@asynccontextmanager
async def http_client(server: ServerProcess, mode: str, **kwargs):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {server.token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=600) as http:
        async with Client(streamable_http_client(server.url, http_client=http), mode=mode, **kwargs) as client:
            yield client


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
async def test_http_serves_both_protocols_with_increasing_progress(http_server, mode):
    async with http_client(http_server, mode) as client:
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else mode)
        assert len((await client.list_tools()).tools) == 13
        await verify_with_progress(client)


@pytest.mark.slow
async def test_http_subscription_to_a_run(http_server):
    store = RunStore.for_home(http_server.home)
    run = store.create_run(problem="x", target="triton", provider="client")
    heard = []

    async def on_message(message):
        if isinstance(message, ResourceUpdatedNotification):
            heard.append(message.params.uri)

    async with http_client(http_server, "legacy", message_handler=on_message) as client:
        await client.subscribe_resource(f"kforge://runs/{run.id}")
        store.update_run(run.id, status="done")
        await wait_until(lambda: heard)
    async with http_client(http_server, "2026-07-28") as client:
        async with client.listen(resource_subscriptions=[f"kforge://runs/{run.id}"]) as events:
            assert (await next_event_while_changing(events, store, run.id)).uri == f"kforge://runs/{run.id}"


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.mark.slow
async def test_http_bad_input_gets_the_spec_codes_and_one_log_line_each_and_the_server_serves_on(http_server):
    headers = {
        "Authorization": f"Bearer {http_server.token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    modern = {**headers, "MCP-Protocol-Version": "2026-07-28"}
    big = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping", "params": {"x": "a" * 5 * 2**20}})
    cases = [  # (headers, body, HTTP status, JSON-RPC code)
        (headers, '{"jsonrpc": "2.0", "id": 1, "method": ', 400, PARSE_ERROR),
        (modern, '{"jsonrpc": "2.0", "id": 1, "method": ', 400, PARSE_ERROR),
        (
            {**modern, "Mcp-Method": "no/such"},
            json.dumps({"jsonrpc": "2.0", "id": 2, "method": "no/such", "params": {"_meta": MODERN_META}}),
            404,
            METHOD_NOT_FOUND,
        ),
        (headers, big, 413, INVALID_REQUEST),
        (headers, '{"id": 5, "what": "no jsonrpc"}', 400, INVALID_PARAMS),  # the SDK's 2025 transport says -32602
    ]
    with httpx.Client(timeout=60) as http:
        for sent_headers, body, status, code in cases:
            answer = http.post(http_server.url, headers=sent_headers, content=body)
            assert answer.status_code == status, answer.text
            assert answer.json()["error"]["code"] == code, answer.text
        call = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "verify", "arguments": {"problem": 1, "target": "triton"}, "_meta": MODERN_META},
        }
        wrong = http.post(
            http_server.url, headers={**modern, "Mcp-Method": "tools/call", "Mcp-Name": "verify"}, json=call
        )
        result = wrong.json()["result"]  # bad arguments: a tool error the model can read (2025-11-25 on)
        assert result["isError"] and "problem" in result["content"][0]["text"], result
    log = http_server.log_tail(20000)
    assert log.count("refused: Parse error") == 2, log
    assert log.count("no/such refused: Method not found") == 1, log
    assert log.count("over the 4194304-byte request limit") == 1, log
    assert log.count("refused: Validation error") == 1, log
    assert "Traceback" not in log, log
    async with http_client(http_server, "legacy") as client:
        assert len((await client.list_tools()).tools) == 13


def test_stdio_bad_input_gets_the_spec_codes_and_one_log_line_each(tmp_path):
    log = tmp_path / "server.log"
    with log.open("w") as errlog:
        proc = subprocess.Popen(
            [str(KFORGE_MCP), "--allow-dir", str(ROOT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            env={**os.environ, "KFORGE_HOME": str(tmp_path / "home")},
            cwd=tmp_path,
        )
        answers: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [answers.put(json.loads(line)) for line in proc.stdout], daemon=True).start()

        def ask(line: str) -> dict:
            proc.stdin.write(line.encode() + b"\n")
            proc.stdin.flush()
            return answers.get(timeout=60)

        def message(**fields) -> str:
            return json.dumps({"jsonrpc": "2.0", **fields})

        try:
            hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
            assert "result" in ask(message(id=0, method="initialize", params=hello))
            proc.stdin.write(message(method="notifications/initialized").encode() + b"\n")
            answer = ask('{"jsonrpc": "2.0", "id": 1, "method": ')
            assert answer["error"]["code"] == PARSE_ERROR and answer["id"] is None, answer
            assert ask('{"id": 2, "what": "no jsonrpc"}')["error"]["code"] == INVALID_REQUEST
            assert ask(message(id=3, method="no/such"))["error"]["code"] == METHOD_NOT_FOUND
            big = ask(message(id=4, method="ping", params={"x": "a" * 5 * 2**20}))
            assert big["error"]["code"] == INVALID_REQUEST and big["id"] == 4, big
            args = {"name": "verify", "arguments": {"problem": 1, "target": "triton"}}
            wrong = ask(message(id=5, method="tools/call", params=args))
            assert wrong["result"]["isError"] and "problem" in wrong["result"]["content"][0]["text"]
            assert ask(message(id=6, method="ping")) == {"jsonrpc": "2.0", "id": 6, "result": {}}  # serving on
        finally:
            proc.stdin.close()
            proc.wait(timeout=60)
    text = log.read_text()
    for words in ("Parse error", "not a JSON-RPC 2.0 message", "no/such refused", "over the 4194304-byte limit"):
        assert [line for line in text.splitlines() if words in line], (words, text)
    assert "Traceback" not in text, text


# ---- results a host can show ----


async def test_a_finished_loop_attempt_links_its_run_best_candidate_and_report(server):
    candidate = Path(example("row_softmax", "triton")).read_text()
    options = {"max_iterations": 1, "baselines": ["eager"], "trials": 1, "profile": False}
    async with Client(server) as client:
        start = await client.call_tool("loop_start", {"problem": problem("row_softmax"), "target": "triton", **options})
        run_id = start.structured_content["run_id"]
        done = await client.call_tool("loop_submit", {"run_id": run_id, "candidate": candidate, "wait_s": 600})
        assert done.structured_content["done"] and done.structured_content["verdict"] == "pass", done.content
        first = done.content[0].text.splitlines()[0]  # a summary, not the JSON again
        assert first.startswith(f"run {run_id}, attempt ") and ": pass" in first, first
        links = {c.uri: c for c in done.content if c.type == "resource_link"}
        base = f"kforge://runs/{run_id}"
        assert set(links) == {base, f"{base}/best", f"{base}/report"}, links
        assert links[f"{base}/report"].mime_type == "text/html"
        images = [c for c in done.content if c.type == "image"]  # the report's plot: speedup per attempt
        assert len(images) == 1 and base64.b64decode(images[0].data).startswith(b"\x89PNG"), done.content
        for uri, shown in links.items():  # every link reads
            contents = (await client.read_resource(uri)).contents[0]
            assert contents.mime_type == shown.mime_type and contents.text, uri
        assert "class ModelNew" in (await client.read_resource(f"{base}/best")).contents[0].text


@pytest.mark.slow  # two loop attempts: 7-20 s on 2 cores
async def test_the_plot_of_a_finished_run_shows_every_attempt_even_after_a_mid_run_read(server):
    options = {"max_iterations": 2, "baselines": ["eager"], "trials": 1, "profile": False}
    async with Client(server) as client:
        start = await client.call_tool(
            "loop_start", {"problem": problem("fused_bias_gelu"), "target": "triton", **options}
        )
        run_id = start.structured_content["run_id"]
        for name in ("triton_wrong", "triton"):
            done = await client.call_tool(
                "loop_submit", {"run_id": run_id, "candidate": example("fused_bias_gelu", name), "wait_s": 600}
            )
            await client.read_resource(f"kforge://runs/{run_id}/report")  # draws (and writes) the report now
        final = (await client.read_resource(f"kforge://runs/{run_id}/report.png")).contents[0].blob
    (image,) = [c for c in done.content if c.type == "image"]
    assert image.data == final  # the finished run's plot, not the one the first read wrote
