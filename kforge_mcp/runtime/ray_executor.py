"""The Ray executor: worker jobs run on the nodes of a Ray cluster, each on a node that has what
its lane needs (a GPU, an ``xpu`` or ``metal`` resource, or just CPUs).

Each slot is a Ray actor that owns a ``WorkerPool`` on its node, so workers stay warm across jobs
and keep the pool's sandbox, timeout and memory watchdog. An actor serves one lane kind; inside
it the lane is the node-local device (Ray sets CUDA_VISIBLE_DEVICES, so a GPU actor's lane is
``cuda:0``). The caller polls the actor for progress, forwards a cancel, and waits with a
deadline of its own, so a lost node never hangs it: a dead actor's job is retried once on
another actor, then fails with a WorkerFailure that says what happened.

Start a cluster's nodes with ``RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper=true``
(a local Ray started here gets it) so a killed actor's worker processes die with it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Any

from kforge_mcp.core.requests import Done, JobRequest, Reply, WarmUpRequest
from kforge_mcp.devices.device import KINDS as DEVICE_KINDS
from kforge_mcp.runtime.pool import STARTUP_TIMEOUT_S, JobCancelled, WorkerFailure
from kforge_mcp.runtime.ray_nodes import (
    HIDDEN_RESOURCES,
    LOCAL_LANE,
    NodeAnswer,
    NodeWorker,
    _killed,
    _shutdown_actor,
    lane_kind,
    merge_probes,
    probe_node,
)
from kforge_mcp.runtime.sandbox import default_sigchld

# what an actor of each lane kind asks Ray for; a target may add a resource of its own
RESOURCE_NAMES = {"cuda": "GPU", "gpu": "GPU"}  # resource names as Ray calls them
LANE_RESOURCES: dict[str, dict[str, float]] = {
    "compile": {"CPU": 1},
    "cpu": {"CPU": 1},
    "metal": {"metal": 1},
    # a device lane asks for what its Device needs: cuda -> GPU, xpu -> xpu, mps -> metal
    **{kind: {RESOURCE_NAMES.get(d.resource, d.resource): 1} for kind, d in DEVICE_KINDS.items() if d.resource},
}
GRACE_S = 60.0  # the caller's deadline beyond the job's own timeout (and a worker start)
POLL_S = 0.1
PROGRESS_EVERY_S = 0.5
CANCEL_GRACE_S = 15.0  # a cancelled job's actor that does not answer by then is killed


class _Lost(Exception):
    """The actor or its node is gone: the job may be retried elsewhere."""


class RayExecutor:
    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        home: str | None = None,
        memory_limit_mb: int | None = 8192,
        cpu_workers: int | None = None,
        accelerator_type: str | None = None,
        lane_resources: dict[str, dict[str, float]] | None = None,
        num_cpus: int | None = None,
        resources: dict[str, float] | None = None,
        placement_timeout_s: float = 120.0,
        grace_s: float = GRACE_S,
    ):
        try:
            import ray
        except ImportError:
            from kforge_mcp.core.errors import InputError

            raise InputError("the Ray executor needs Ray: pip install 'kforge-mcp[ray]'") from None
        self.ray = ray
        self.home, self.memory_limit_mb = home, memory_limit_mb
        self.accelerator_type = accelerator_type
        self.lane_resources = {**LANE_RESOURCES, **(lane_resources or {})}
        self.placement_timeout_s, self.grace_s = placement_timeout_s, grace_s
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            options: dict[str, Any] = dict(
                include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING, configure_logging=True
            )
            if address:
                ray.init(address=address, **options)
            else:  # a local Ray: worker processes die with a killed actor (the raylet reaps them)
                ray.init(
                    address="local",
                    num_cpus=num_cpus or os.cpu_count(),
                    resources=resources,
                    object_store_memory=256 * 2**20,
                    _system_config={"kill_child_processes_on_worker_exit_with_raylet_subreaper": True},
                    **options,
                )
            default_sigchld()  # ray.init made this process ignore SIGCHLD; local pools need it back
        total_cpus = int(ray.cluster_resources().get("CPU", 1))
        self.cpu_workers = max(1, cpu_workers or total_cpus // 2)
        # ray's typed overloads of remote() leave out the actor options (max_concurrency); without ray
        # installed (it is an extra) there is nothing to check, hence unused-ignore
        self._actor_class = ray.remote(  # type: ignore[call-overload, unused-ignore]
            max_concurrency=4, max_restarts=0, max_task_retries=0
        )(NodeWorker)
        self._probe = ray.remote(probe_node)
        self._cond = threading.Condition()
        self._free: dict[tuple, list] = {}  # key -> idle actors
        self._all: dict[tuple, list] = {}  # key -> every actor of the key, busy or idle (and being created)
        self._held: dict[str, float] = {}  # resources our actors hold (we assume the cluster is ours)
        self._nodes_cache: tuple[float, list] = (0.0, [])
        self._closed = False

    # ---- what a lane needs, and where it fits ----

    def _need(self, lane: str, target: str | None = None) -> tuple[tuple, dict[str, float]]:
        kind = lane_kind(lane)
        if kind not in self.lane_resources:
            raise WorkerFailure(
                "internal",
                f"the Ray executor has no resource mapping for lane '{lane}'; "
                f"known lane kinds: {', '.join(self.lane_resources)}",
            )
        need = dict(self.lane_resources[kind])
        if kind not in ("compile", "cpu"):
            for name in _target_requires(target):
                need.setdefault(RESOURCE_NAMES.get(name, name), 1)
            if "GPU" in need and self.accelerator_type:
                need[f"accelerator_type:{self.accelerator_type}"] = 0.001  # how Ray spells accelerator_type
        return (kind, tuple(sorted(need.items()))), need

    def _nodes(self) -> list[dict]:
        stamp, nodes = self._nodes_cache
        if time.monotonic() - stamp > 2.0:
            nodes = [n for n in self.ray.nodes() if n.get("Alive")]
            self._nodes_cache = (time.monotonic(), nodes)
        return nodes

    @staticmethod
    def _fits(resources: dict[str, float], need: dict[str, float]) -> int:
        return int(min(resources.get(r, 0.0) / amount for r, amount in need.items())) if need else 0

    def _capacity(self, key: tuple, need: dict[str, float]) -> int:
        """How many actors of this key the cluster holds (CPU lanes: at most cpu_workers)."""
        fit = sum(self._fits(n.get("Resources", {}), need) for n in self._nodes())
        return min(fit, self.cpu_workers) if key[0] in ("compile", "cpu") else fit

    def slots(self, lane: str) -> int:
        try:
            key, need = self._need(lane)
        except WorkerFailure:
            return 0
        return self._capacity(key, need)

    # ---- actors ----

    def _room_for(self, need: dict[str, float]) -> bool:
        total = self.ray.cluster_resources()
        return all(total.get(r, 0.0) - self._held.get(r, 0.0) >= amount - 1e-9 for r, amount in need.items())

    def _hold(self, need: dict[str, float], sign: int) -> None:
        for r, amount in need.items():
            self._held[r] = self._held.get(r, 0.0) + sign * amount

    def _acquire(
        self, key: tuple, need: dict[str, float], lane: str, cancel: threading.Event | None, on_progress
    ) -> tuple:
        with self._cond:
            while True:
                if cancel is not None and cancel.is_set():
                    raise JobCancelled()
                if self._closed:
                    raise WorkerFailure("internal", "the Ray executor was shut down")
                free, mine = self._free.setdefault(key, []), self._all.setdefault(key, [])
                if free:
                    return free.pop()
                capacity = self._capacity(key, need)
                if capacity == 0:
                    raise WorkerFailure(
                        "internal",
                        f"no node of the Ray cluster offers what lane '{lane}' needs "
                        f"({_fmt(need)}); the cluster has {_fmt(self.ray.cluster_resources())}",
                    )
                if len(mine) < capacity and not self._room_for(need) and not mine:
                    self._reclaim_idle(need)  # e.g. a compile actor holds the CPU a cpu lane needs
                if len(mine) < capacity and self._room_for(need):
                    self._hold(need, +1)
                    placeholder = object()
                    mine.append(placeholder)
                    break
                self._cond.wait(0.5)
        try:
            if on_progress:
                on_progress(f"starting a Ray worker for lane {lane} ({_fmt(need)})")
            actor, node = self._create(key, need, lane)
        except BaseException:
            with self._cond:
                mine.remove(placeholder)
                self._hold(need, -1)
                self._cond.notify_all()
            raise
        with self._cond:
            mine[mine.index(placeholder)] = (actor, node)
        return actor, node

    def _create(self, key: tuple, need: dict[str, float], lane: str) -> tuple:
        kind = key[0]
        options: dict = {"num_cpus": need.get("CPU", 0), "num_gpus": need.get("GPU", 0)}
        custom = {r: a for r, a in need.items() if r not in ("CPU", "GPU") and not r.startswith("accelerator_type:")}
        if custom:
            options["resources"] = custom
        if "GPU" in need and self.accelerator_type:
            options["accelerator_type"] = self.accelerator_type
        actor = self._actor_class.options(**options).remote(self.home, self.memory_limit_mb, LOCAL_LANE.get(kind, kind))
        try:
            node = self.ray.get(actor.ready.remote(), timeout=self.placement_timeout_s)
        except self.ray.exceptions.GetTimeoutError:
            self.ray.kill(actor)
            raise WorkerFailure(
                "internal",
                f"no Ray node took a worker for lane '{lane}' ({_fmt(need)}) within "
                f"{self.placement_timeout_s:g} s; are those resources held by something else?",
            ) from None
        except self.ray.exceptions.RayError as e:
            raise WorkerFailure(
                "crash", f"the Ray worker for lane '{lane}' failed to start: {_first_line(e)}"
            ) from None
        return actor, node

    def _release(self, key: tuple, slot: tuple) -> None:
        with self._cond:
            self._free.setdefault(key, []).append(slot)
            self._cond.notify_all()

    def _discard(self, key: tuple, need: dict[str, float], slot: tuple, kill: bool = True) -> None:
        with self._cond:
            mine = self._all.get(key, [])
            if slot in mine:
                mine.remove(slot)
                self._hold(need, -1)
            self._cond.notify_all()
        if kill:
            try:
                self.ray.kill(slot[0], no_restart=True)
            except Exception:  # noqa: BLE001  (already gone)
                pass

    def _reclaim_idle(self, need: dict[str, float]) -> None:
        """Kill one idle actor of another kind that holds a resource this need wants. Under _cond."""
        for key, free in self._free.items():
            other = dict(key[1])
            if free and any(r in other for r in need):
                slot = free.pop()
                self._all[key].remove(slot)
                self._hold(other, -1)
                _shutdown_actor(self.ray, slot[0])
                return

    # ---- jobs ----

    def run(
        self,
        lane: str,
        request: JobRequest,
        timeout_s: float,
        on_progress=None,
        cancel: threading.Event | None = None,
    ) -> Reply:
        kind, payload = request.kind, request.model_dump(mode="json")
        if kind == "probe":  # list_targets: what the whole cluster offers, node by node
            return Done(value=self.probe_cluster(timeout_s))
        key, need = self._need(lane, getattr(request, "target", None))
        lost: list[str] = []
        for _attempt in range(2):
            slot = self._acquire(key, need, lane, cancel, on_progress)
            try:
                reply = self._run_on(slot, lane, kind, payload, timeout_s, on_progress, cancel)
            except _Lost as e:
                self._discard(key, need, slot)
                lost.append(str(e))
                if on_progress:
                    on_progress(f"{e}; retrying on another Ray worker")
                continue
            except WorkerFailure as e:
                # the actor lives, its pool already replaced the worker; a hung actor was killed
                if getattr(e, "actor_killed", False):
                    self._discard(key, need, slot, kill=False)
                else:
                    self._release(key, slot)
                raise
            self._release(key, slot)
            return reply
        raise WorkerFailure(
            "crash",
            f"the job on lane '{lane}' lost its Ray worker twice, so it was not retried again: {'; then '.join(lost)}",
        )

    def _run_on(
        self,
        slot: tuple,
        lane: str,
        kind: str,
        payload: dict,
        timeout_s: float,
        on_progress,
        cancel: threading.Event | None,
    ) -> Reply:
        ray = self.ray
        actor, node = slot
        where = f"node {node['address']} ({node['node_id'][:12]})"
        job_id = uuid.uuid4().hex
        ref = actor.run.remote(job_id, kind, payload, timeout_s)
        # the pool enforces timeout_s; this deadline only catches a node that stopped answering
        patience = timeout_s + STARTUP_TIMEOUT_S + self.grace_s
        deadline = time.monotonic() + patience
        seen, next_poll, cancelled_at = 0, time.monotonic() + PROGRESS_EVERY_S, None
        while True:
            ready, _ = ray.wait([ref], timeout=POLL_S)
            if ready:
                try:
                    answer = NodeAnswer.model_validate(ray.get(ref))
                except ray.exceptions.RayTaskError as e:  # the actor method raised: our bug, not the node's
                    raise WorkerFailure("internal", f"{kind} on {where} failed: {_first_line(e)}") from None
                except ray.exceptions.RayError as e:  # actor died, node died, worker crashed
                    raise _Lost(
                        f"the Ray worker for lane '{lane}' on {where} was lost during {kind}: "
                        f"{type(e).__name__}: {_first_line(e)}"
                    ) from None
                if on_progress:
                    for line in answer.progress_log[seen:]:
                        on_progress(line)
                if answer.failure is not None:
                    if answer.failure.reason == "cancelled":
                        raise JobCancelled()
                    lost = answer.failure
                    raise WorkerFailure(lost.reason, f"{lost.message} (on {where})", lost.stderr_tail, lost.line)
                assert answer.reply is not None  # an answer carries a reply or a failure
                return answer.reply.model_copy(update={"node": answer.node})
            now = time.monotonic()
            if cancel is not None and cancel.is_set():
                if cancelled_at is None:
                    cancelled_at = now
                    actor.cancel.remote(job_id)
                elif now - cancelled_at > CANCEL_GRACE_S:
                    raise _killed(ray, actor, JobCancelled())
            if now > deadline:
                raise _killed(
                    ray,
                    actor,
                    WorkerFailure(
                        "timeout",
                        f"{kind} on {where} gave no answer within {patience:.0f} s (the job's timeout, a "
                        "worker start and a grace period); its Ray worker was killed",
                    ),
                )
            if on_progress and now >= next_poll:
                next_poll = now + PROGRESS_EVERY_S
                try:
                    lines = ray.get(actor.progress.remote(job_id, seen), timeout=5)
                except ray.exceptions.GetTimeoutError:
                    lines = []
                except ray.exceptions.RayError:
                    continue  # a dead actor: the job's own ref says so on the next wait
                seen += len(lines)
                for line in lines:
                    on_progress(line)

    # ---- the cluster ----

    def probe_cluster(self, timeout_s: float = 300.0) -> dict:
        """Probe every alive node (a task pinned to it) and merge: a target is available when some
        node offers it; ``nodes`` says what each node offers."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        pinned = [NodeAffinitySchedulingStrategy(n["NodeID"], soft=False) for n in nodes]
        refs = [
            self._probe.options(num_cpus=0, scheduling_strategy=s).remote(self.home, self.memory_limit_mb, timeout_s)
            for s in pinned
        ]
        results = []
        for n, ref in zip(nodes, refs):
            try:
                results.append(self.ray.get(ref, timeout=timeout_s + STARTUP_TIMEOUT_S))
            except Exception as e:  # noqa: BLE001  (a lost node is reported, not fatal)
                results.append(
                    {
                        "node_id": n["NodeID"],
                        "address": n.get("NodeManagerAddress"),
                        "error": f"probe failed: {type(e).__name__}: {_first_line(e)}",
                    }
                )
        return merge_probes(
            results,
            {n["NodeID"]: n.get("Resources", {}) for n in nodes},
            {"executor": "ray", "cpu_workers": str(self.cpu_workers)},
        )

    def prewarm(self, lane: str) -> None:
        pass  # actors start on the first job; a cluster's nodes may not even be there yet

    def warm_up(self, lane: str, request: WarmUpRequest, timeout_s: float, after_work: bool = False) -> Reply | None:
        return None  # which actor serves a cluster's first job is not known: nothing to warm ahead

    def describe(self) -> dict:
        report = self.probe_cluster()
        return {"executor": self.name, "nodes": report["nodes"]}

    def shutdown(self) -> None:
        with self._cond:
            self._closed = True
            slots = [s for mine in self._all.values() for s in mine if isinstance(s, tuple)]
            self._all.clear()
            self._free.clear()
            self._cond.notify_all()
        for actor, _node in slots:
            _shutdown_actor(self.ray, actor)
        if self.owns_ray and self.ray.is_initialized():
            self.ray.shutdown()


def _target_requires(target: str | None) -> list[str]:
    if not target:
        return []
    try:
        from kforge_mcp.targets import get_target

        t = get_target(target)
    except Exception:  # noqa: BLE001  (the engine reports unknown targets itself)
        return []
    return [t.requires] if t.requires else []


def _fmt(resources: dict) -> str:
    shown = {k: v for k, v in resources.items() if not k.startswith(HIDDEN_RESOURCES)}
    return ", ".join(f"{k}={v:g}" for k, v in sorted(shown.items())) or "nothing"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__
