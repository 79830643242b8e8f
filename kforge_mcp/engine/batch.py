"""verify_batch: many verifies at once, as many side by side as the executor has workers for their lanes,
with CPU workers building CUDA candidates ahead of the GPU (judge/pipeline.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from kforge_mcp.core.errors import KforgeError
from kforge_mcp.core.options import VerifyCall
from kforge_mcp.core.schemas import VerifyReport
from kforge_mcp.engine.parts import EngineParts, Progress
from kforge_mcp.engine.verify import verify
from kforge_mcp.judge.pipeline import start_prebuilds, warm_batch_baselines
from kforge_mcp.runtime.pool import JobCancelled

Item = VerifyCall | KforgeError  # a verify's arguments, or why they were refused (that item's error report)


def verify_batch(
    parts: EngineParts,
    items: Sequence[Item],
    on_result: Callable[[int, VerifyReport], None] | None = None,
    on_progress: Progress = None,
    cancel: threading.Event | None = None,
) -> list[VerifyReport]:
    """The reports in item order; ``on_result(index, report)`` as each one finishes, in completion order. A bad
    item becomes an ``error`` report naming what was wrong; it never stops the batch."""
    if not items:
        return []
    calls = [c for c in items if isinstance(c, VerifyCall)]
    lanes = {parts.lane_for(c.target, c.device) for c in calls}
    width = max(1, sum(parts.executor.slots(lane) for lane in lanes))
    reports: list[VerifyReport] = [VerifyReport()] * len(items)
    done_lock, done = threading.Lock(), [0]
    indexed = {i: c for i, c in enumerate(items) if isinstance(c, VerifyCall)}
    prebuilt = start_prebuilds(parts, indexed, on_progress, cancel)  # CPU workers build ahead of the GPU
    warm_batch_baselines(parts, indexed, on_progress, cancel)  # and meanwhile the GPU times the baselines

    def one(i: int) -> None:
        item = items[i]
        prebuilt.wait(i)
        try:
            if isinstance(item, KforgeError):
                raise item
            if cancel is not None and cancel.is_set():
                raise JobCancelled()
            report = verify(parts, item, on_progress=None, cancel=cancel, head_start=False)
        except JobCancelled:
            report = VerifyReport(verdict="error", correct=False, target=target_of(item), errors=["cancelled"])
        except KforgeError as e:  # bad input for this item: its own verdict, not the batch's
            report = VerifyReport(verdict="error", correct=False, target=target_of(item), errors=[str(e)])
        reports[i] = report
        with done_lock:
            done[0] += 1
            if on_progress:
                on_progress(f"verified {done[0]}/{len(items)}: item {i} {report.verdict}")
            if on_result:
                on_result(i, report)

    with ThreadPoolExecutor(max_workers=min(width, len(items)), thread_name_prefix="kforge-batch") as ex:
        list(ex.map(one, range(len(items))))
    return reports


def target_of(item: Item) -> str | None:
    return item.target if isinstance(item, VerifyCall) else None
