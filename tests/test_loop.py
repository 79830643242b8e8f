"""The KForge loop: generate, repair until correct, optimize, keep the best; recorded in the run
store, resumable, and driven through MCP (sampling, and the client-driven loop_start / loop_submit)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from loop_replies import PROBLEM, REPLIES, SYNTAX_ERROR_LINE

import kforge_mcp
from kforge_mcp.agents.loop import LoopDriver, summarize
from kforge_mcp.core.settings import Settings
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_ctrl_c_stops_the_run_and_resume_continues_from_its_last_attempt(engine, tmp_path):
    driver = LoopDriver(engine, RunStore(tmp_path / "runs.db"))

    def dies_after_two(prompt):
        if dies_after_two.calls == 2:
            raise KeyboardInterrupt  # Ctrl-C while the agent writes the third attempt
        dies_after_two.calls += 1
        return REPLIES[dies_after_two.calls - 1]

    dies_after_two.calls = 0
    run = driver.start(PROBLEM, "triton", provider="scripted", options={**FAST, "max_iterations": 3, "profile": False})
    with pytest.raises(KeyboardInterrupt):
        driver.drive(run.id, dies_after_two)
    stopped = RunStore(tmp_path / "runs.db").get_run(run.id)
    assert stopped.status == "stopped" and "interrupted by the user" in stopped.stop_reason and stopped.attempts == 2

    fresh = LoopDriver(engine, RunStore(tmp_path / "runs.db"))  # a new process, a new store
    agent = Scripted(REPLIES[2:])
    result = fresh.resume(run.id, agent)
    assert len(agent.prompts) == 1 and "do not match the reference" in agent.prompts[0]
    assert [a.verdict for a in result.attempts] == ["compile_error", "fail", "pass"]
    assert result.best.index == 2 and result.status == "done"
    assert [a.prompt for a in fresh.store.attempts(run.id)][2] == agent.prompts[0]  # attempts 0 and 1 were not redone


# ---- several candidates per round, and the token budget ----


class Concurrent:
    """A thread-safe scripted agent: replies in the order asked. The first ``together`` calls wait for
    each other (a barrier), so they pass only if the loop really asked for them at the same time."""

    def __init__(self, replies, together: int = 0):
        self.replies, self.prompts, self.lock = list(replies), [], threading.Lock()
        self.barrier = threading.Barrier(together, timeout=60) if together else None

    def __call__(self, prompt: str) -> str:
        with self.lock:
            i = len(self.prompts)
            self.prompts.append(prompt)
        if self.barrier is not None and i < self.barrier.parties:
            self.barrier.wait()
        return self.replies[i]


@pytest.fixture
def two_cpu_workers(engine):
    """An engine over the session's home (its compile cache) with two interpreter workers; the
    first two verify jobs must be in flight together, and each job's span is kept."""
    from kforge_mcp.api import Engine
    from kforge_mcp.runtime.executor import LocalExecutor
    from kforge_mcp.runtime.pool import WorkerPool

    pool = WorkerPool(engine.home, settings=Settings.read())
    eng = Engine(home=engine.home, executor=LocalExecutor(pool, cpu_workers=2))
    real, gate, spans = eng.executor.run, threading.Barrier(2, timeout=120), []

    def run(lane, request, *args, **kwargs):
        if request.kind == "verify" and len(spans) < 2:
            spans.append(None)
            gate.wait()  # broken (an error) if the second verify does not come while the first waits
        t0 = time.monotonic()
        try:
            return real(lane, request, *args, **kwargs)
        finally:
            if request.kind == "verify":
                spans.append((lane, t0, time.monotonic()))

    eng.executor.run = run
    eng.spans, eng.lanes = spans, pool._lanes
    yield eng
    eng.close()


@pytest.mark.slow
def test_several_candidates_per_round_are_generated_and_checked_side_by_side(two_cpu_workers):
    from kforge_mcp.agents.loop import estimate_tokens

    eng = two_cpu_workers
    agent = Concurrent(REPLIES, together=3)  # round 0: a syntax error, a wrong and a right kernel; then the faster one
    result = LoopDriver(eng).run(
        PROBLEM, "triton", agent, provider="scripted", options={**FAST, "candidates_per_round": 3, "profile": False}
    )
    assert result.status == "done" and result.stop_reason == "max_iterations", result
    assert len(agent.prompts) == 4  # 3 in round 0, then 1: the budget of 4 attempts is not overrun
    first, optimize = agent.prompts[0], agent.prompts[3]
    assert agent.prompts[1] == agent.prompts[2] == first and "Write the first version" in first
    assert "Make it faster" in optimize and "did not compile" not in optimize and "do not match" not in optimize

    attempts = RunStore.for_home(eng.home).attempts(result.run_id)
    assert [a.round for a in attempts] == [0, 0, 0, 3] and [a.index for a in attempts] == [0, 1, 2, 3]
    assert sorted(summarize(a).verdict for a in attempts[:3]) == ["compile_error", "fail", "pass"]
    right = next(a for a in attempts[:3] if a.correct)
    assert right.candidate in optimize  # the round's best is what the optimize prompt improves
    assert attempts[3].pass_ == "optimize" and attempts[3].correct and attempts[3].prompt == optimize
    top = max((a for a in attempts if a.correct), key=lambda a: a.speedup)
    assert result.best.index == top.index
    # plain-str replies: tokens estimated at four characters a token, per attempt
    assert [a.tokens for a in attempts] == [estimate_tokens(a.prompt, a.reply) for a in attempts]
    assert result.tokens == sum(a.tokens for a in attempts) > 0
    (lane_a, a0, a1), (lane_b, b0, b1) = eng.spans[2:4]
    assert a0 < b1 and b0 < a1 and {lane_a, lane_b} == {"cpu"}  # two verifies ran at the same time
    assert {"cpu", "cpu.1"} <= set(eng.lanes)  # on two interpreter workers


def test_the_token_budget_stops_the_run_and_each_attempts_tokens_are_kept(engine):
    from kforge_mcp.agents.loop import Reply

    agent = Scripted([Reply(REPLIES[0], tokens=1000), Reply(REPLIES[1], tokens=1000), Reply(REPLIES[2], tokens=1000)])
    result = LoopDriver(engine).run(
        PROBLEM, "triton", agent, provider="scripted", options={**FAST, "max_tokens": 1500, "profile": False}
    )
    assert result.status == "done" and result.stop_reason == "max_tokens" and len(agent.prompts) == 2
    assert [a.tokens for a in result.attempts] == [1000, 1000] and result.tokens == 2000
    store = RunStore.for_home(engine.home)
    assert [a.tokens for a in store.attempts(result.run_id)] == [1000, 1000]
    assert store.get_run(result.run_id).tokens == 2000


# ---- through MCP ----

from mcp import Client, types  # noqa: E402

MCP_FAST = {"trials": 1, "baselines": ["eager"], "timing_budget_s": 0.2, "max_iterations": 4}


def sampler(agent: Scripted):
    async def on_sample(context, params: types.CreateMessageRequestParams):
        prompt = params.messages[0].content.text
        return types.CreateMessageResult(
            role="assistant", model="scripted", content=types.TextContent(type="text", text=agent(prompt))
        )

    return on_sample


@pytest.mark.slow
@pytest.mark.anyio
async def test_run_loop_tool_uses_the_clients_model_through_sampling(server):
    agent = Scripted(REPLIES)
    progress = []

    async def on_progress(value, total, message):
        progress.append(message)

    async with Client(server, mode="legacy", sampling_callback=sampler(agent)) as client:
        result = await client.call_tool(
            "run_loop",
            {"problem": PROBLEM, "target": "triton", "wait_s": 300, **MCP_FAST},
            progress_callback=on_progress,
        )
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
async def test_run_loop_tool_asks_for_several_candidates_and_stops_at_the_token_budget(server):
    from kforge_mcp.agents.loop import estimate_tokens

    agent = Concurrent([REPLIES[1], REPLIES[2]])
    async with Client(server, mode="legacy", sampling_callback=sampler(agent)) as client:
        result = await client.call_tool(
            "run_loop",
            {
                "problem": PROBLEM,
                "target": "triton",
                "wait_s": 300,
                **MCP_FAST,
                "profile": False,
                "candidates_per_round": 2,
                "token_budget": 1,
            },
        )
        assert not result.is_error, result.content
        out = result.structured_content
        run = json.loads((await client.read_resource(f"kforge://runs/{out['run_id']}")).contents[0].text)
    assert out["status"] == "done" and out["stop_reason"] == "max_tokens"  # after the first round of two
    assert len(agent.prompts) == 2 and agent.prompts[0] == agent.prompts[1]  # two sampling requests, one prompt
    assert sorted(a["verdict"] for a in out["attempts"]) == ["fail", "pass"]
    assert [a["round"] for a in out["attempts"]] == [0, 0]
    assert [a["tokens"] for a in run["attempts"]] == [estimate_tokens(a["prompt"], a["reply"]) for a in run["attempts"]]
    assert out["tokens"] == sum(a["tokens"] for a in run["attempts"]) and out["best"]["index"] in (0, 1)


@pytest.mark.anyio
async def test_run_loop_without_sampling_points_to_the_client_driven_loop(server):
    async with Client(server) as client:
        result = await client.call_tool("run_loop", {"problem": PROBLEM, "target": "triton"})
    assert result.is_error and "loop_start" in result.content[0].text


@pytest.mark.slow
@pytest.mark.anyio
async def test_client_driven_loop(server):
    replies = iter(REPLIES)
    async with Client(server) as client:
        start = await client.call_tool(
            "loop_start", {"problem": PROBLEM, "target": "triton", **MCP_FAST, "profile": False}
        )
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
        r = await client.call_tool("loop_start", {"problem": PROBLEM, "target": "rocm"})
    assert r.is_error and "no prompt templates for target 'rocm'" in r.content[0].text


# ---- reports ----


@pytest.mark.slow
def test_every_run_writes_a_report_and_kforge_report_redraws_it(engine, tmp_path, capsys):
    from markupsafe import escape

    from kforge_mcp.cli import build_parser, read_settings, run

    result = LoopDriver(engine).run(
        PROBLEM,
        "triton",
        Scripted([REPLIES[0], REPLIES[2]]),
        provider="scripted",
        options={**FAST, "max_iterations": 2, "profile": False},
    )
    assert result.report == str(engine.home / "reports" / result.run_id / "report.html")
    assert result.report_uri == f"kforge://runs/{result.run_id}/report"
    html = Path(result.report).read_text()
    assert (Path(result.report).parent / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "data:image/png;base64,iVBORw0KGgo" in html  # the plot inline: one self-contained page
    assert str(escape(result.best.candidate)) in html and 'float("inf")' not in html  # the source, escaped
    assert "compile_error" in html and "Best: attempt 1" in html

    files = kforge_mcp.write_report(result.run_id, out=str(tmp_path / "lib"), home=str(engine.home))
    assert Path(files.html).read_text().count("<tr") == 3 and Path(files.png).stat().st_size > 5000

    home = str(engine.home)
    args = build_parser().parse_args(["report", result.run_id, "--home", home, "--out", str(tmp_path / "cli")])
    assert run(args, read_settings()) == 0 and (tmp_path / "cli" / "report.html").exists()
    typo = result.run_id[:6] + "zzzzzz"
    assert run(build_parser().parse_args(["report", typo, "--home", str(engine.home)]), read_settings()) == 2
    err = capsys.readouterr().err
    assert f"unknown run_id '{typo}'" in err and result.run_id in err  # the closest id is named


@pytest.mark.anyio
async def test_report_resource_and_unknown_run_ids_over_mcp(server):
    async with Client(server, mode="legacy", sampling_callback=sampler(Scripted([REPLIES[2]]))) as client:
        r = await client.call_tool(
            "run_loop",
            {"problem": PROBLEM, "target": "triton", "wait_s": 300, **MCP_FAST, "max_iterations": 1, "profile": False},
        )
        out = r.structured_content
        page = (await client.read_resource(out["report_uri"])).contents[0]
        by_prefix = json.loads((await client.read_resource(f"kforge://runs/{out['run_id'][:-1]}")).contents[0].text)
        mistyped = out["run_id"][:-1] + ("0" if out["run_id"][-1] != "0" else "1")
        bad = await client.call_tool("run_loop", {"problem": PROBLEM, "target": "triton", "run_id": mistyped})
    assert Path(out["report"]).is_file() and page.mime_type == "text/html"
    assert "<h1>Run " + out["run_id"] in page.text and "data:image/png;base64," in page.text
    assert by_prefix["id"] == out["run_id"]  # an id may be shortened to a unique prefix
    assert bad.is_error and "unknown run_id" in bad.content[0].text and out["run_id"] in bad.content[0].text


# ---- cancel, dead runs and resume ----


@pytest.mark.anyio
async def test_job_cancel_stops_the_run_and_run_id_resumes_it(server):
    import anyio

    reached, proceed = anyio.Event(), anyio.Event()
    asked = []

    async def on_sample(context, params):
        prompt = params.messages[0].content.text
        asked.append(prompt)
        if len(asked) == 2:  # the agent is writing the second attempt when the user cancels
            reached.set()
            await proceed.wait()
        reply = [REPLIES[0], REPLIES[1], REPLIES[1], REPLIES[2]][len(asked) - 1]
        return types.CreateMessageResult(
            role="assistant", model="scripted", content=types.TextContent(type="text", text=reply)
        )

    opts = {"problem": PROBLEM, "target": "triton", **MCP_FAST, "max_iterations": 3, "profile": False}
    async with Client(server, mode="legacy", sampling_callback=on_sample) as client:
        started = (await client.call_tool("run_loop", {**opts, "wait_s": 0})).structured_content
        await reached.wait()
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "job_cancel", {"job_id": started["job_id"]})
            await anyio.sleep(0.5)  # the cancel lands while the reply is still being written
            proceed.set()
        job = (await client.call_tool("job_result", {"job_id": started["job_id"], "wait_s": 50})).structured_content
        stopped = json.loads((await client.read_resource(f"kforge://runs/{started['run_id']}")).contents[0].text)
        resumed = await client.call_tool("run_loop", {**opts, "run_id": started["run_id"], "wait_s": 300})
    assert job["status"] == "cancelled" and job["result"]["status"] == "stopped"
    assert stopped["status"] == "stopped" and stopped["stop_reason"] == "cancelled" and len(stopped["attempts"]) == 1
    out = resumed.structured_content
    assert [a["verdict"] for a in out["attempts"]] == ["compile_error", "fail", "pass"] and out["status"] == "done"
    assert asked[2] == asked[1]  # the cut-off attempt was asked again; attempt 0 was not redone
    assert len(asked) == 4


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            pass
    return out


@pytest.mark.slow
def test_a_killed_loop_reads_as_interrupted_and_resume_finishes_it(tmp_path):
    import os
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    from conftest import ROOT
    from llm_server import LLMServer

    secret = "sk-test-kill-0123456789"
    home = tmp_path / "home"
    env = {**os.environ, "OPENAI_API_KEY": secret, "KFORGE_HOME": str(home)}
    kforge = [sys.executable, "-m", "kforge_mcp.cli"]
    with LLMServer(replies=REPLIES[:3], block_at=2) as llm:
        url = llm.url + "/v1"
        log = open(tmp_path / "first.log", "w")
        proc = subprocess.Popen(
            [
                *kforge,
                "run-loop",
                PROBLEM,
                "--target",
                "triton",
                "--provider",
                "openai",
                "--base-url",
                url,
                "--max-iterations",
                "3",
                "--trials",
                "1",
                "--baselines",
                "eager",
                "--no-profile",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            assert llm.reached.wait(300), (tmp_path / "first.log").read_text()  # asking for attempt 2
            store = RunStore.for_home(home)
            (live,) = store.list_runs()
            assert live.status == "running" and live.owner_pid == proc.pid and live.attempts == 2
            workers = [
                p for p in _children(proc.pid) if b"kforge_mcp.worker_jobs" in Path(f"/proc/{p}/cmdline").read_bytes()
            ]
            assert workers and secret.encode() in Path(f"/proc/{proc.pid}/environ").read_bytes()
            assert all(secret.encode() not in Path(f"/proc/{p}/environ").read_bytes() for p in workers)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        llm.release.set()

        with sqlite3.connect(home / "runs.db") as db:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        dead = store.get_run(live.id)
        assert dead.status == "interrupted" and f"pid {proc.pid}" in dead.stop_reason and "--resume" in dead.stop_reason
        deadline = time.time() + 30  # its idle workers see their pipe close and exit
        while any(Path(f"/proc/{p}").exists() for p in workers) and time.time() < deadline:
            time.sleep(0.2)
        assert not [p for p in workers if Path(f"/proc/{p}").exists()]

        done = subprocess.run(
            [*kforge, "run-loop", "--resume", live.id], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"run {live.id}: done (max_iterations)" in done.stdout and "report:" in done.stdout
    attempts = store.attempts(live.id)
    assert [summarize(a).verdict for a in attempts] == ["compile_error", "fail", "pass"]
    assert llm.prompts()[3] == llm.prompts()[2] == attempts[2].prompt  # the killed attempt was asked again
    assert len(llm.requests) == 4  # and the two finished ones were not
    assert store.get_run(live.id).best_attempt == 2 and (home / "reports" / live.id / "report.html").is_file()
    assert secret.encode() not in b"".join(p.read_bytes() for p in home.glob("runs.db*"))


def test_the_loop_stops_when_the_analysis_agent_says_the_best_is_at_its_limit():
    """A stop recommendation ends the run (stop_at_limit, on by default); the optimize prompt carries the
    agent's recommendations with their evidence, action and how the gain was estimated."""
    from kforge_mcp.agents.loop import optimize_feedback
    from kforge_mcp.agents.results import LoopOptions
    from kforge_mcp.store import Attempt, Run

    limit = {
        "rule": "at_the_limit",
        "title": "At the limit: stop here",
        "stop": True,
        "expected_gain": 0.2,
        "priority": "low",
        "evidence": [{"metric": "tensor_op_gmma pipe busy", "value": "97.1%"}],
        "action": "Stop optimizing.",
        "gain_basis": "1 - fraction of speed of light",
    }
    best = Attempt(
        run_id="r",
        index=1,
        pass_="optimize",
        correct=True,
        speedup=1.6,
        recommendations=[limit],
        verify_report={"speedup": 1.6, "fraction_of_sol": 0.8, "sol_ms": 1.1, "sol_path": "bf16 ..."},
    )
    run = Run(id="r", problem="p", target="triton", status="running", created=time.time(), updated=time.time())
    opts = LoopOptions(max_iterations=8)
    assert (
        LoopDriver._stop_reason(None, run, opts, [best], best)
        == "at the limit (analysis agent): At the limit: stop here"
    )
    assert LoopDriver._stop_reason(None, run, opts.model_copy(update={"stop_at_limit": False}), [best], best) is None
    best.recommendations = [{**limit, "stop": False}]
    assert LoopDriver._stop_reason(None, run, opts, [best], best) is None
    text = optimize_feedback(best, None)
    assert "biggest lever first" in text and "tensor_op_gmma pipe busy=97.1%" in text
    assert "expected gain estimated as: 1 - fraction of speed of light" in text and "bound assumes bf16" in text
