"""What runs on each node of a Ray cluster: the actor that owns a WorkerPool there (NodeWorker),
the probe of what the node offers (devices, targets, resources) merged into one report, and how
an actor is stopped or found dead.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from pydantic import BaseModel, Field

from kforge_mcp.core.home import check_home
from kforge_mcp.core.process_env import variables
from kforge_mcp.core.requests import Done, ProbeRequest, Reply, parse_request
from kforge_mcp.core.settings import Settings
from kforge_mcp.runtime.pool import WorkerFailure, WorkerPool

LOCAL_LANE = {"cuda": "cuda:0", "xpu": "xpu:0"}  # the lane inside the actor: the node's first device it was given


HIDDEN_RESOURCES = ("node:", "memory", "object_store")  # Ray bookkeeping, not what a node offers


EMPTIED_BY_RAY = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ONEAPI_DEVICE_SELECTOR")


class Lost(BaseModel):
    """Why a job on a node has no reply: its WorkerFailure, sent back as data."""

    reason: str
    message: str
    stderr_tail: str = ""
    line: int | None = None


class NodeAnswer(BaseModel):
    """What a node's actor sends back for one job: the worker's reply, or why there is none, and every
    progress line the job wrote."""

    node: str
    reply: Reply | None = None
    failure: Lost | None = None
    progress_log: list[str] = Field(default_factory=list)


def lane_kind(lane: str) -> str:
    """``cuda:3`` -> ``cuda``; ``cpu.1`` -> ``cpu``."""
    return lane.split(":")[0].split(".")[0]


def _node_info() -> dict:
    import ray

    return {
        "node_id": ray.get_runtime_context().get_node_id(),
        "address": ray.util.get_node_ip_address(),
        "pid": os.getpid(),
    }


def _home(home: str | None, settings: Settings) -> Path:
    """The engine home on this node, checked like the server's (a read-only or full one is a clear error)."""
    path = Path(home).expanduser() if home else settings.home
    check_home(path)
    return path


class NodeWorker:
    """A Ray actor (a threaded one: ``run`` blocks, ``progress`` and ``cancel`` answer meanwhile)
    that owns a warm worker pool on its node and runs one job at a time."""

    def __init__(self, home: str | None, memory_limit_mb: int | None, lane: str):
        settings = Settings.read()  # this actor's entry: KFORGE_* read once, from its node's environment
        self.pool = WorkerPool(_home(home, settings), memory_limit_mb=memory_limit_mb, settings=settings)
        self.lane = lane
        self.node = _node_info()
        self.jobs: dict[str, tuple[threading.Event, list[str]]] = {}

    def ready(self) -> dict:
        return self.node

    def run(self, job_id: str, kind: str, payload: dict, timeout_s: float) -> dict:
        """A NodeAnswer, as plain data for Ray to carry."""
        cancel = threading.Event()
        log: list[str] = []
        self.jobs[job_id] = (cancel, log)
        answer = NodeAnswer(node=self.node["node_id"], progress_log=log)
        try:
            answer.reply = self.pool.run(self.lane, parse_request(kind, payload), timeout_s, log.append, cancel)
        except WorkerFailure as e:  # JobCancelled too: sent back as data, re-raised by the caller
            answer.failure = Lost(reason=e.reason, message=e.message, stderr_tail=e.stderr_tail, line=e.line)
        finally:
            self.jobs.pop(job_id, None)
        return answer.model_dump()

    def progress(self, job_id: str, since: int) -> list[str]:
        job = self.jobs.get(job_id)
        return job[1][since:] if job else []

    def cancel(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job:
            job[0].set()  # the pool kills the worker

    def shutdown(self) -> None:
        self.pool.shutdown()


def probe_node(home: str | None, memory_limit_mb: int | None, timeout_s: float) -> dict:
    """A Ray task pinned to one node: which targets and devices that node offers."""
    # Ray empties CUDA_VISIBLE_DEVICES for a task that asked for no GPU; the probe must see them all
    base = {k: v for k, v in variables().items() if not (k in EMPTIED_BY_RAY and not v)}
    settings = Settings.read()  # this task's entry: KFORGE_* read once, from its node's environment
    pool = WorkerPool(_home(home, settings), memory_limit_mb=memory_limit_mb, base_env=base, settings=settings)
    try:
        reply = pool.run("compile", ProbeRequest(), timeout_s)
    except WorkerFailure as e:
        return {**_node_info(), "error": f"probe failed: {e.message}"}
    finally:
        pool.shutdown()
    if not isinstance(reply, Done):
        return {**_node_info(), "error": f"probe failed: {reply.message}"}
    return {**_node_info(), "report": reply.value}


def merge_probes(results: list[dict], resources: dict[str, dict], host_extra: dict[str, str]) -> dict:
    """One TargetsReport for the cluster from each node's probe."""
    targets: dict[str, dict] = {}
    host: dict[str, str] = {}
    nodes = []
    for r in results:
        report = r.get("report") or {}
        res = resources.get(r["node_id"], {})
        offers = [t["name"] for t in report.get("targets", []) if t.get("available")]
        devices = sorted({d for t in report.get("targets", []) if t.get("available") for d in t.get("devices", [])})
        nodes.append(
            {
                "node_id": r["node_id"],
                "address": r.get("address"),
                "alive": "error" not in r,
                "resources": {k: v for k, v in res.items() if not k.startswith(HIDDEN_RESOURCES)},
                "targets": offers,
                "devices": devices,
                "error": r.get("error"),
                "host": {
                    k: v
                    for k, v in report.get("host", {}).items()
                    if k in ("python", "torch", "platform", "arch") or k.startswith("device ")
                },
            }
        )
        if report and (not host or ("arch" in report.get("host", {}) and "arch" not in host)):
            host = dict(report.get("host", {}))  # a GPU node's host facts (its arch) win
        for t in report.get("targets", []):
            merged = targets.get(t["name"])
            if merged is None:
                targets[t["name"]] = dict(t, devices=list(t.get("devices", [])))
                continue
            if t.get("available") and not merged.get("available"):
                merged.update({k: v for k, v in t.items() if k != "devices"}, reason=None)
            merged["can_compile"] = merged.get("can_compile") or t.get("can_compile", False)
            merged["devices"] += [d for d in t.get("devices", []) if d not in merged["devices"]]
    for t in targets.values():  # GPUs first, then the CPU, as a single machine lists them
        t["devices"].sort(key=lambda d: (d == "cpu", d))
    host.update(host_extra, nodes=str(len(nodes)))
    if not targets:
        raise WorkerFailure(
            "internal",
            "no node of the Ray cluster answered the probe: "
            + "; ".join(f"{n['address']}: {n['error']}" for n in nodes),
        )
    return {"targets": list(targets.values()), "host": host, "nodes": nodes}


def _killed(ray, actor, error: WorkerFailure) -> WorkerFailure:
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001
        pass
    error.actor_killed = True
    return error


def _shutdown_actor(ray, actor) -> None:
    """Stop the actor's workers, then the actor (a kill alone would leave its workers behind)."""
    try:
        ray.get(actor.shutdown.remote(), timeout=10)
    except Exception:  # noqa: BLE001
        pass
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001
        pass
