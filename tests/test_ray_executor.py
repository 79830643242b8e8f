"""The Ray executor on a real two-node local Ray cluster (CPU only): jobs run on the Triton
interpreter through Ray actors, land on the node that has the resource they need, survive a
killed worker (retry, or a clear error) and keep their timeouts; verify_batch streams progress
over MCP. One cluster for the module: starting Ray is the slow part on a 2-core machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, example, hostile, problem

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a Ray cluster per module: the full suite only
from ray.cluster_utils import Cluster  # noqa: E402

from kforge_mcp.api import Engine  # noqa: E402
from kforge_mcp.core.requests import WarmUpRequest  # noqa: E402
from kforge_mcp.core.settings import Settings  # noqa: E402
from kforge_mcp.runtime.executor import LocalExecutor  # noqa: E402
from kforge_mcp.runtime.pool import WorkerFailure, WorkerPool  # noqa: E402
from kforge_mcp.runtime.ray_executor import RayExecutor  # noqa: E402

GELU = problem("fused_bias_gelu")
FAST = {"target": "triton", "trials": 1, "baselines": ["eager"], "timing_budget_s": 0.2, "timeout_s": 240}


@pytest.fixture(scope="module")
def cluster():
    # head: 1 CPU; second node: 1 CPU and a "special" resource (a stand-in for xpu or metal)
    c = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": False,
            "object_store_memory": 100 * 2**20,
            "_system_config": {"kill_child_processes_on_worker_exit_with_raylet_subreaper": True},
        },
    )
    special = c.add_node(num_cpus=1, resources={"special": 1}, object_store_memory=100 * 2**20)
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    yield c, special.node_id
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("kforge-ray-home")


@pytest.fixture(scope="module")
def engine(cluster, home):
    eng = Engine(home=home, executor=RayExecutor(home=str(home), cpu_workers=2), allow_dirs=[ROOT, home])
    yield eng
    eng.close()


def slow_candidate(home: Path, seconds: float) -> str:
    """The honest Triton candidate, slowed at import: time to kill its worker mid-job."""
    path = home / f"slow_{seconds:g}.py"
    path.write_text(f"import time\ntime.sleep({seconds})\n" + Path(example("fused_bias_gelu", "triton")).read_text())
    return str(path)


def test_list_targets_shows_each_node_and_the_cluster(engine, cluster):
    report = engine.list_targets(refresh=True)
    triton = next(t for t in report.targets if t.name == "triton")
    assert triton.available and triton.devices == ["cpu"]
    assert report.host["executor"] == "ray" and report.host["nodes"] == "2"
    nodes = {n.node_id: n for n in report.nodes}
    assert len(nodes) == 2 and all(n.alive and "triton" in n.targets for n in nodes.values())
    assert nodes[cluster[1]].resources.get("special") == 1
    assert engine.executor.slots("cpu") == 2 and engine.executor.slots("cuda:0") == 0


def test_a_cluster_lists_its_live_nodes_even_where_this_machine_probed_before(cluster, tmp_path):
    """A new server on a home where a local probe is kept answers from the cluster, not from that probe."""
    local = Engine(home=tmp_path)
    try:
        assert local.list_targets(refresh=True).nodes == []  # kept under the home, for the next start
    finally:
        local.close()
    eng = Engine(home=tmp_path, executor=RayExecutor(home=str(tmp_path)))
    try:
        report = eng.list_targets()  # what list_targets answers first
        live = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert {n.node_id for n in report.nodes} == live and len(live) == 2
        assert all(n.alive and "triton" in n.targets and n.devices == ["cpu"] for n in report.nodes)
    finally:
        eng.close()


def test_kforge_targets_under_ray_lists_each_node(cluster, tmp_path):
    env = {**os.environ, "KFORGE_HOME": str(tmp_path)}
    cli = [sys.executable, "-m", "kforge_mcp.cli", "targets", "--executor", "ray", "--ray-address", cluster[0].address]
    proc = subprocess.run([*cli, "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    nodes = json.loads(proc.stdout)["nodes"]
    assert len(nodes) == 2 and all("triton" in n["targets"] for n in nodes)
    table = subprocess.run(cli, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert table.returncode == 0 and table.stdout.count("triton on cpu") == 2, table.stdout + table.stderr


def test_verify_batch_through_ray_passes_and_fails_correctly(engine):
    results = []
    reports = engine.verify_batch(
        [{"problem": GELU, "candidate": example("fused_bias_gelu", c)} for c in ("triton", "triton_wrong")],
        on_result=lambda i, r: results.append(i),
        **FAST,
    )
    assert [r.verdict for r in reports] == ["pass", "fail"], [r.errors for r in reports]
    assert reports[0].execution == "triton-interpreter" and reports[1].mismatches
    assert all(r.node for r in reports) and sorted(results) == [0, 1]


def test_a_job_that_needs_a_custom_resource_lands_on_the_node_that_has_it(cluster, home):
    # cpu-lane jobs of this executor ask for "special": only the second node has it
    executor = RayExecutor(home=str(home), lane_resources={"cpu": {"special": 1}})
    eng = Engine(home=home, executor=executor)
    try:
        assert executor.slots("cpu") == 1
        report = eng.verify(GELU, example("fused_bias_gelu", "triton"), **FAST)
        assert report.verdict == "pass" and report.node == cluster[1]
    finally:
        eng.close()


def test_a_lane_no_node_offers_fails_clearly_instead_of_waiting(cluster, home):
    executor = RayExecutor(home=str(home))
    try:
        with pytest.raises(
            WorkerFailure, match=r"no node of the Ray cluster offers what lane 'cuda:0' needs \(GPU=1\)"
        ):
            executor.run("cuda:0", WarmUpRequest(device="cuda:0"), timeout_s=10)
    finally:
        executor.shutdown()


def test_timeout_holds_through_ray(engine):
    started = time.monotonic()
    report = engine.verify(problem("row_softmax"), hostile("hang"), **{**FAST, "timeout_s": 20})
    # the call's limit (at most the 20 s the job has) or the job's timeout, whichever comes first
    assert report.verdict == "error" and "did not finish within " in report.errors[0]
    assert "the worker was killed" in report.errors[0]
    assert "on node" in report.errors[0] and time.monotonic() - started < 120


def _kill_busy_actor_when(engine, ready: threading.Event, times: int) -> threading.Thread:
    def killer():
        for _ in range(times):
            assert ready.wait(180), "the job never started"
            ready.clear()
            busy = [
                s
                for key, mine in engine.executor._all.items()
                for s in mine
                if isinstance(s, tuple) and s not in engine.executor._free.get(key, [])
            ]
            for actor, _node in busy:
                ray.kill(actor)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    return t


def test_a_worker_killed_mid_job_is_retried_on_another(engine, home):
    ready, lines = threading.Event(), []

    def progress(message):
        lines.append(message)
        if message == "loading candidate" and not any("retrying" in m for m in lines):
            ready.set()

    killer = _kill_busy_actor_when(engine, ready, times=1)
    report = engine.verify(GELU, slow_candidate(home, 6), on_progress=progress, **FAST)
    killer.join(5)
    assert any("was lost during verify" in m and "retrying on another Ray worker" in m for m in lines), lines
    assert report.verdict == "pass", report.errors


def test_a_worker_killed_twice_gives_a_clear_error(engine, home):
    ready = threading.Event()
    killer = _kill_busy_actor_when(engine, ready, times=2)
    report = engine.verify(
        GELU, slow_candidate(home, 7), on_progress=lambda m: m == "loading candidate" and ready.set(), **FAST
    )
    killer.join(5)
    assert report.verdict == "error"
    assert "lost its Ray worker twice" in report.errors[0] and "ActorDiedError" in report.errors[0], report.errors


@pytest.mark.anyio
async def test_verify_batch_tool_streams_progress_through_ray(engine):
    from mcp import Client

    from kforge_mcp.server import build_server

    messages = []

    async def on_progress(progress, total, message):
        messages.append(message)

    items = [
        {"problem": GELU, "candidate": example("fused_bias_gelu", c)} for c in ("triton", "triton_wrong", "triton")
    ]
    async with Client(build_server(engine)) as client:
        result = await client.call_tool(
            "verify_batch",
            {"items": items, "target": "triton", "trials": 1, "baselines": ["eager"], "wait_s": 600},
            progress_callback=on_progress,
        )
    assert not result.is_error, result.content
    out = result.structured_content
    assert [r["verdict"] for r in out["reports"]] == ["pass", "fail", "pass"]
    assert out["summary"]["verdicts"] == {"pass": 2, "fail": 1} and out["summary"]["best_index"] in (0, 2)
    assert [m for m in messages if m.startswith("verified ")][-1].startswith("verified 3/3")


def test_local_executor_runs_cpu_jobs_side_by_side(home):
    """Two interpreter workers ('cpu' and 'cpu.1'), both with TRITON_INTERPRET=1."""
    pool = WorkerPool(home, settings=Settings.read())
    eng = Engine(home=home, executor=LocalExecutor(pool, cpu_workers=2))
    try:
        assert eng.executor.slots("cpu") == 2 and eng.executor.slots("cuda:0") == 1
        reports = eng.verify_batch([{"problem": GELU, "candidate": example("fused_bias_gelu", "triton")}] * 2, **FAST)
        assert [r.verdict for r in reports] == ["pass", "pass"] and {"cpu", "cpu.1"} <= set(pool._lanes)
    finally:
        eng.close()
