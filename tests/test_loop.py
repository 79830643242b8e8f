"""The KForge loop: generate, repair until correct, optimize, keep the best; recorded in the run
store, resumable, and driven through MCP (sampling, and the client-driven loop_start / loop_submit)."""

from __future__ import annotations

import json

import pytest
from loop_replies import PROBLEM, REPLIES, SYNTAX_ERROR_LINE

from kforge_mcp.agents.loop import LoopDriver
from kforge_mcp.store import RunStore

FAST = {"trials": 1, "baselines": ["eager"], "timing_budget_s": 0.2, "max_iterations": 4}


class Scripted:
    """A generation agent that answers from a script and keeps the prompts it was given."""

    def __init__(self, replies):
        self.replies, self.prompts = list(replies), []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.replies[len(self.prompts) - 1]


def assert_feedback_reached_the_prompts(prompts):
    first, repair_compile, repair_wrong, optimize = prompts
    assert "## Task" in first and "Write the first version" in first and "class Model(nn.Module)" in first
    assert "did not compile" in repair_compile and f"line {SYNTAX_ERROR_LINE}" in repair_compile
    assert "SyntaxError" in repair_compile and "def forward(self, x)" in repair_compile
    assert "do not match the reference" in repair_wrong and "max_abs_error" in repair_wrong
    assert "expected" in repair_wrong and "got" in repair_wrong and "* 2.0" in repair_wrong
    assert "Speedup" in optimize and "Make it faster" in optimize and "Profile:" in optimize


def assert_picks_best_by_speedup(result):
    verdicts = [a.verdict for a in result.attempts]
    assert verdicts == ["compile_error", "fail", "pass", "pass"]
    assert [a.pass_ for a in result.attempts] == ["functional"] * 3 + ["optimize"]
    correct = [a for a in result.attempts if a.correct]
    assert all(a.speedup and a.speedup > 0 for a in correct)
    top = max(correct, key=lambda a: a.speedup)
    assert result.best.index == top.index and result.best.speedup == top.speedup
    assert "class ModelNew" in result.best.candidate and result.best.verify_report["verdict"] == "pass"
    assert result.status == "done" and result.stop_reason == "max_iterations"


def test_library_loop_repairs_then_optimizes_and_records_every_attempt(engine):
    agent = Scripted(REPLIES)
    driver = LoopDriver(engine)
    result = driver.run(PROBLEM, "triton", agent, provider="scripted", options=FAST)
    assert len(agent.prompts) == 4
    assert_feedback_reached_the_prompts(agent.prompts)
    assert_picks_best_by_speedup(result)

    store = RunStore.for_home(engine.home)  # a fresh store instance over the same file
    attempts = store.attempts(result.run_id)
    assert [a.prompt for a in attempts] == agent.prompts
    assert attempts[0].compile_report["ok"] is False and attempts[1].verify_report["mismatches"]
    assert attempts[2].recommendations is not None and store.get_run(result.run_id).best_attempt == result.best.index


def test_an_interrupted_run_resumes_from_its_last_attempt(engine, tmp_path):
    driver = LoopDriver(engine, RunStore(tmp_path / "runs.db"))

    def dies_after_two(prompt):
        if dies_after_two.calls == 2:
            raise KeyboardInterrupt  # the process "dies": nothing after this runs
        dies_after_two.calls += 1
        return REPLIES[dies_after_two.calls - 1]

    dies_after_two.calls = 0
    run = driver.start(PROBLEM, "triton", provider="scripted", options={**FAST, "max_iterations": 3, "profile": False})
    with pytest.raises(KeyboardInterrupt):
        driver.drive(run.id, dies_after_two)
    assert RunStore(tmp_path / "runs.db").get_run(run.id).status == "running"  # left as the process died

    fresh = LoopDriver(engine, RunStore(tmp_path / "runs.db"))  # a new process, a new store
    agent = Scripted(REPLIES[2:])
    result = fresh.resume(run.id, agent)
    assert len(agent.prompts) == 1 and "do not match the reference" in agent.prompts[0]
    assert [a.verdict for a in result.attempts] == ["compile_error", "fail", "pass"]
    assert result.best.index == 2 and result.status == "done"


# ---- through MCP ----

from mcp import Client, types  # noqa: E402

MCP_FAST = {"trials": 1, "baselines": ["eager"], "timing_budget_s": 0.2, "max_iterations": 4}


def sampler(agent: Scripted):
    async def on_sample(context, params: types.CreateMessageRequestParams):
        prompt = params.messages[0].content.text
        return types.CreateMessageResult(role="assistant", model="scripted",
                                         content=types.TextContent(type="text", text=agent(prompt)))  # fmt: skip

    return on_sample


@pytest.mark.anyio
async def test_run_loop_tool_uses_the_clients_model_through_sampling(server):
    agent = Scripted(REPLIES)
    progress = []

    async def on_progress(value, total, message):
        progress.append(message)

    async with Client(server, mode="legacy", sampling_callback=sampler(agent)) as client:
        result = await client.call_tool("run_loop", {"problem": PROBLEM, "target": "triton", "wait_s": 300, **MCP_FAST},
                                        progress_callback=on_progress)  # fmt: skip
        assert not result.is_error, result.content
        out = result.structured_content
        run_id = out["run_id"]
        runs = json.loads((await client.read_resource("kforge://runs")).contents[0].text)
        run = json.loads((await client.read_resource(f"kforge://runs/{run_id}")).contents[0].text)
        best = (await client.read_resource(f"kforge://runs/{run_id}/best")).contents[0].text
    assert len(agent.prompts) == 4
    assert_feedback_reached_the_prompts(agent.prompts)
    assert [a["verdict"] for a in out["attempts"]] == ["compile_error", "fail", "pass", "pass"]
    correct = [a for a in out["attempts"] if a["correct"]]
    top = max(correct, key=lambda a: a["speedup"])
    assert out["best"]["index"] == top["index"] and out["status"] == "done"
    assert any(m and "asking the generation agent" in m for m in progress)
    assert run_id in [r["id"] for r in runs] and run["best_attempt"] == top["index"]
    assert [a["prompt"] for a in run["attempts"]] == agent.prompts and run["attempts"][0]["pass"] == "functional"
    assert best == out["best"]["candidate"] and "class ModelNew" in best


@pytest.mark.anyio
async def test_run_loop_without_sampling_points_to_the_client_driven_loop(server):
    async with Client(server) as client:
        result = await client.call_tool("run_loop", {"problem": PROBLEM, "target": "triton"})
    assert result.is_error and "loop_start" in result.content[0].text


@pytest.mark.anyio
async def test_client_driven_loop(server):
    replies = iter(REPLIES)
    async with Client(server) as client:
        start = await client.call_tool("loop_start", {"problem": PROBLEM, "target": "triton", **MCP_FAST,
                                                      "profile": False})  # fmt: skip
        assert not start.is_error, start.content
        run_id, prompt = start.structured_content["run_id"], start.structured_content["prompt"]
        prompts_seen, results = [prompt], []
        while True:
            r = await client.call_tool("loop_submit", {"run_id": run_id, "candidate": next(replies), "wait_s": 300})
            assert not r.is_error, r.content
            results.append(r.structured_content)
            if r.structured_content["done"]:
                break
            prompts_seen.append(r.structured_content["next_prompt"])
        late = await client.call_tool("loop_submit", {"run_id": run_id, "candidate": REPLIES[3]})
        listed = await client.list_prompts()
        rendered = await client.get_prompt("write_kernel", {"problem": PROBLEM, "target": "triton"})
    assert [r["verdict"] for r in results] == ["compile_error", "fail", "pass", "pass"]
    assert results[0]["compile_report"]["ok"] is False and f"line {SYNTAX_ERROR_LINE}" in results[0]["feedback"]
    assert results[1]["verify_report"]["mismatches"] and "max_abs_error" in results[1]["feedback"]
    assert f"line {SYNTAX_ERROR_LINE}" in prompts_seen[1] and "max_abs_error" in prompts_seen[2]
    assert "Make it faster" in prompts_seen[3] and results[-1]["next_prompt"] is None
    assert results[-1]["best"]["index"] in (2, 3) and results[-1]["stop_reason"] == "max_iterations"
    assert late.is_error and "done" in late.content[0].text
    assert {p.name for p in listed.prompts} >= {"write_kernel", "repair_kernel", "optimize_kernel"}
    assert "class ModelNew" in rendered.messages[0].content.text


@pytest.mark.anyio
async def test_loop_start_rejects_a_target_without_templates(server):
    async with Client(server) as client:
        r = await client.call_tool("loop_start", {"problem": PROBLEM, "target": "metal"})
    assert r.is_error and "no prompt templates for target 'metal'" in r.content[0].text
