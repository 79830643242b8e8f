"""verify and verify_batch as a pipeline: CPU workers build the CUDA candidates while the GPU
compiles the torch.compile baseline and times the baselines (the ``baselines`` job, kept in the
GPU worker for the verifies that follow), then verifies one candidate after another.

A prebuild fills the same build cache the GPU worker's ``load`` reads (same key: sources, flags,
toolchain, arch). It is only a head start: a prebuild that fails or is refused changes nothing,
the GPU worker then builds (and reports errors) itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from kforge_mcp.core.errors import KforgeError
from kforge_mcp.core.options import VerifyCall
from kforge_mcp.core.requests import BaselinesRequest, Done, PrebuildRequest, VerifyRequest
from kforge_mcp.core.source import Source
from kforge_mcp.runtime.executor import Executor
from kforge_mcp.targets import TARGETS

PREBUILD_TIMEOUT_S = 900
BASELINE_TIMEOUT_S = 600
Progress = Callable[[str], None] | None


class Lanes(Protocol):
    """What the pipeline needs of an engine: its executor, the lane a verify runs on, a source resolved."""

    executor: Executor
    prebuilt: set[tuple[str, str, str]]  # (target, lane, source digest) of the head starts started
    baselines_kept: set[str]  # the baselines jobs done: their timings are kept in the lane's worker and on disk

    def lane_for(self, target: str, device: str | None) -> str: ...

    def resolve_source(self, value: str, role: str) -> Source: ...


class Prebuilds:
    """The prebuilds of a batch, by item index."""

    def __init__(self, futures: dict[int, Future] | None = None):
        self.futures = futures or {}

    def wait(self, index: int) -> None:
        """Until item ``index``'s prebuild (if it has one) is over, whatever its outcome."""
        if index in self.futures:
            self.futures[index].result()


def describe_build(build: dict) -> str:
    """'split: compiled host 9.6 s, device 1.2 s; reused main' from a BuildInfo's fields."""
    compiled = ", ".join(f"{unit} {s:.1f} s" for unit, s in (build.get("compiled") or {}).items())
    parts = [f"compiled {compiled}"] if compiled else []
    parts += [f"reused {'+'.join(build['reused'])}"] if build.get("reused") else []
    return f"{build.get('path', '?')}: {', '.join(parts) or 'nothing to do'}"


def worth_a_head_start(target: str, lane: str) -> bool:
    """A build long next to its verify, on a GPU lane (a CPU-only host builds nothing ahead)."""
    known = TARGETS.get(target)
    return known is not None and known.builds_ahead and lane.startswith("cuda")


JUDGING = {"precision", "atol", "rtol", "baselines", "timing_budget_s"}  # a call's options its baselines depend on


def baselines_key(request: BaselinesRequest) -> str:
    """One baselines job's identity: what the kept timings are keyed by (judge/baselines.py), less what the
    worker derives from these."""
    return request.model_dump_json(include={"problem", "device", "fresh_timing_inputs", *JUDGING})


def warm_baselines(engine: Lanes, request: BaselinesRequest, on_progress: Progress, cancel) -> None:
    """The ``baselines`` job on the verify's lane: it compiles the reference and times the baselines
    while the candidate builds on a CPU worker. A head start only: the verify does it itself if
    this fails. Once per problem and judging options on a server: a second one only built the reference
    and drew inputs on the GPU worker, ahead of every verify, to find the timings kept."""
    key = baselines_key(request)
    if not request.baselines or key in engine.baselines_kept:  # a verify of the same problem again: nothing to do
        return
    started = time.perf_counter()
    try:
        reply = engine.executor.run(request.device, request, timeout_s=BASELINE_TIMEOUT_S, cancel=cancel)
    except Exception:  # noqa: BLE001  (the verify compiles and times the baselines itself)
        return
    if isinstance(reply, Done):
        engine.baselines_kept.add(key)
    if on_progress and isinstance(reply, Done) and not reply.value.get("kept_already"):
        on_progress(
            f"baselines ({', '.join(reply.value.get('baselines', []))}) compiled and timed on the GPU "
            f"in {time.perf_counter() - started:.1f} s while the candidate builds"
        )


def head_start_one(engine: Lanes, request: VerifyRequest, on_progress: Progress, cancel) -> None:
    """Before one verify of a CUDA candidate on a GPU: a CPU worker starts building it while the GPU
    worker compiles and times the baselines. The verify then waits only for what is left of the build
    (the build's lock), and reuses the baselines."""
    if worth_a_head_start(request.target, request.device):
        prebuild(engine, [(0, request.target, request.device, request.candidate)], on_progress, cancel)
        warm_baselines(engine, BaselinesRequest.of(request), on_progress, cancel)


Ahead = tuple[int, str, str, Source]  # (item index, target, lane, source)


def items_worth_a_head_start(engine: Lanes, calls: Mapping[int, VerifyCall], role: str) -> Iterator[Ahead]:
    """(index, target, lane, source of ``role``) of each call worth a head start whose source resolves
    (one that does not is left to its verify, which reports it)."""
    for i, call in calls.items():
        lane = engine.lane_for(call.target, call.device)
        if not worth_a_head_start(call.target, lane):
            continue
        try:
            source = engine.resolve_source(getattr(call, role), role)
        except KforgeError:
            continue
        yield i, call.target, lane, source


def start_prebuilds(
    engine: Lanes, calls: Mapping[int, VerifyCall], on_progress: Progress, cancel: threading.Event | None
) -> Prebuilds:
    """Start building ahead the calls of a batch worth it, when there are two or more of them."""
    todo = list(items_worth_a_head_start(engine, calls, "candidate"))
    return prebuild(engine, todo, on_progress, cancel) if len(todo) >= 2 else Prebuilds()


def prebuild(engine: Lanes, todo: list[Ahead], on_progress: Progress, cancel: threading.Event | None) -> Prebuilds:
    """Each candidate of ``todo`` built on a CPU worker for its lane, as many at once as the compile lane has; one
    this server built ahead before is left out: its extension is in the build cache (or its error is the same),
    and a head start that finds it there only holds the build's lock while the GPU worker waits to load it."""
    todo = [t for t in todo if (t[1], t[2], t[3].digest) not in engine.prebuilt]
    engine.prebuilt |= {(target, lane, source.digest) for _, target, lane, source in todo}  # built or refused alike
    pool = ThreadPoolExecutor(max_workers=engine.executor.slots("compile"), thread_name_prefix="kforge-prebuild")

    def one(i: int, target: str, device: str, source) -> None:
        if cancel is not None and cancel.is_set():
            return
        started = time.perf_counter()
        try:
            request = PrebuildRequest(target=target, candidate=source, device=device)
            reply = engine.executor.run("compile", request, timeout_s=PREBUILD_TIMEOUT_S, cancel=cancel)
        except Exception:  # noqa: BLE001  (a head start only; the GPU worker builds it otherwise)
            return
        if on_progress:
            value = reply.value if isinstance(reply, Done) else {}
            how = "; ".join(map(describe_build, value.get("builds", []))) or "not built ahead"
            inside = f"{value['seconds']:.1f} s in the worker; " if "seconds" in value else ""
            wall = time.perf_counter() - started
            on_progress(f"item {i}: built on a CPU worker in {wall:.1f} s ({inside}{how}); next: GPU")

    futures = {item[0]: pool.submit(one, *item) for item in todo}
    pool.shutdown(wait=False)
    return Prebuilds(futures)


def warm_batch_baselines(engine: Lanes, calls: Mapping[int, VerifyCall], on_progress: Progress, cancel) -> None:
    """One ``baselines`` job per distinct problem and judging options among a batch's calls built ahead."""
    seen = set()
    for i, target, lane, problem in items_worth_a_head_start(engine, calls, "problem"):
        judging = calls[i].model_dump(include=JUDGING)
        request = BaselinesRequest(problem=problem, target=target, device=lane, **judging)
        key = baselines_key(request)
        if key not in seen:
            seen.add(key)
            warm_baselines(engine, request, on_progress, cancel)
