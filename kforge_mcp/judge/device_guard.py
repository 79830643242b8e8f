"""Device-wide state a candidate changes (the persisting-L2 set-aside, an access policy window on the
timed stream, the cache configuration, ...) outlives its call: left in place, it moves the timings of
the baselines timed after it and of every candidate after it in the worker. The guard takes the
device's snapshot before any candidate code runs (before its module is imported), and after candidate
code has run (a correctness trial, a batch of timed calls) compares, records what changed and puts it
back before anything else runs or is timed. What cannot be put back makes the worker be replaced.
"""

from __future__ import annotations

from typing import Any

from kforge_mcp.core.schemas import Finding
from kforge_mcp.devices.device import get_device

# changes that can move a timing: what stays in L2 and how it is fetched, where the kernels run and
# which stream the clock's events are on
MOVES_TIMINGS = {
    "persisting_l2_limit": "the persisting-L2 set-aside (cudaLimitPersistingL2CacheSize)",
    "access_policy_window": "an access policy window on the timed stream",
    "l2_fetch_granularity_limit": "the L2 fetch granularity (cudaLimitMaxL2FetchGranularity)",
    "cache_config": "the device's cache configuration (cudaDeviceSetCacheConfig)",
    "shared_mem_config": "the device's shared-memory configuration",
    "stream_priority": "the timed stream's priority",
    "current_stream": "the current stream",
    "current_device": "the current device",
}
OTHERS = {
    "stack_size_limit": "the device stack size limit",
    "malloc_heap_limit": "the device malloc heap size limit",
    "printf_fifo_limit": "the device printf FIFO size limit",
}
FINDING_CODE = "device_state_changed"


def changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict]:
    """What differs between two snapshots: name -> {before, after}."""
    return {n: {"before": before[n], "after": after.get(n)} for n in before if after.get(n) != before[n]}


def state_finding(changed: dict[str, dict], unrestored: list[str], device: str = "") -> Finding | None:
    """The finding for what a candidate changed: ``suspicious`` when any change can move a timing,
    ``info`` otherwise; it says whether everything was put back."""
    if not changed and not unrestored:
        return None
    timing = [n for n in changed if n in MOVES_TIMINGS]
    names = [MOVES_TIMINGS.get(n) or OTHERS.get(n, n) for n in changed]
    if unrestored:
        after = f"it could not all be put back ({', '.join(unrestored)}): the worker is replaced after this verify"
    else:
        after = "it was put back (persisting L2 lines reset) before anything else ran or was timed"
    return Finding(
        code=FINDING_CODE,
        severity="suspicious" if timing or unrestored else "info",
        evidence={"device": device, "changed": changed, "moves_timings": timing, "unrestored": unrestored},
        message=f"the candidate changed device-wide state: {'; '.join(names)}"
        + (
            " (this can make what is timed after it slower or faster: the flush and the baselines see it)"
            if timing
            else ""
        )
        + f"; {after}",
    )


class DeviceGuard:
    """Snapshot once, then ``settle()`` after each stretch of candidate code: compare, record, put back."""

    def __init__(self, device: str):
        self.name = device
        self.device = get_device(device)
        self.changed: dict[str, dict] = {}
        self.unrestored: list[str] = []
        self.unread = ""
        try:
            self.before = self.device.snapshot()
        except Exception as e:  # noqa: BLE001  (no runtime to ask: verify goes on, and says so)
            self.before, self.unread = {}, f"{type(e).__name__}: {e}"

    def settle(self) -> None:
        if not self.before:  # a device with nothing to guard
            return
        try:
            for name, change in changes(self.before, self.device.snapshot()).items():
                self.changed.setdefault(name, change)  # the first change seen is the candidate's own
            # put back every time: persisting L2 lines are reset even when the limits read the same
            left = self.device.restore(self.before)
        except Exception as e:  # noqa: BLE001  (a faulted context: the worker goes anyway)
            left = [f"unreadable ({type(e).__name__}: {e})"]
        self.unrestored += [name for name in left if name not in self.unrestored]

    def finding(self) -> Finding | None:
        if self.unread:
            return Finding(
                code="device_state_unchecked",
                severity="warning",
                evidence={"device": self.name, "error": self.unread},
                message=f"device-wide state could not be read, so changes to it were not checked: {self.unread}",
            )
        return state_finding(self.changed, self.unrestored, self.name)
