"""verify_batch as a pipeline: CPU workers build the next CUDA candidates while the GPU verifies
the current one, so the GPU lane waits on nvcc only for the first item.

A prebuild fills the same build cache the GPU worker's ``load`` reads (same key: sources, flags,
toolchain, arch). It is only a head start: a prebuild that fails or is refused changes nothing,
the GPU worker then builds (and reports errors) itself.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from .errors import KforgeError

PREBUILT_TARGETS = ("cuda",)  # targets whose build is long next to their verify
PREBUILD_TIMEOUT_S = 900


class Prebuilds:
    """The prebuilds of a batch, by item index."""

    def __init__(self, futures: dict[int, Future] | None = None):
        self.futures = futures or {}

    def wait(self, index: int) -> None:
        """Until item ``index``'s prebuild (if it has one) is over, whatever its outcome."""
        if index in self.futures:
            self.futures[index].result()


def start_prebuilds(
    engine, items: list[dict], on_progress: Callable[[str], None] | None, cancel: threading.Event | None
) -> Prebuilds:
    """Start building ahead the items worth it (none for a single item)."""
    todo = []
    for i, args in enumerate(items):
        target = args.get("target", "triton")
        lane = engine.lane_for(target, args.get("device"))
        if target not in PREBUILT_TARGETS or not lane.startswith("cuda"):
            continue
        try:
            source = engine.resolve_source(args["candidate"], "candidate")
        except KforgeError:
            continue  # verify reports it
        todo.append((i, target, source, lane))
    if len(todo) < 2:
        return Prebuilds()
    pool = ThreadPoolExecutor(max_workers=engine.executor.slots("compile"), thread_name_prefix="kforge-prebuild")

    def one(i: int, target: str, source, device: str) -> None:
        if cancel is not None and cancel.is_set():
            return
        started = time.perf_counter()
        try:
            reply = engine.executor.run(
                "compile",
                "prebuild",
                {"target": target, "candidate": source.to_wire(), "device": device},
                timeout_s=PREBUILD_TIMEOUT_S,
                cancel=cancel,
            )
        except Exception:  # noqa: BLE001  (a head start only; the GPU worker builds it otherwise)
            return
        if on_progress:
            builds = (reply.get("value") or {}).get("builds", []) if reply.get("ok") else []
            how = ", ".join(b.get("path", "?") for b in builds) or "not built ahead"
            on_progress(f"item {i}: built on a CPU worker in {time.perf_counter() - started:.1f} s ({how}); next: GPU")

    futures = {i: pool.submit(one, i, target, source, lane) for i, target, source, lane in todo}
    pool.shutdown(wait=False)
    return Prebuilds(futures)
