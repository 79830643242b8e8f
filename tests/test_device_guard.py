"""The device-state guard (judge/device_guard.py) without a GPU: what each device kind guards, the verdict a
change in a snapshot earns, the put-back after every stretch of candidate code, and the timing order that
keeps a baseline from running between a candidate's batch and the put-back. On the GPU:
tests/test_gpu_nvidia.py (an L2-pinning candidate and its honest twin)."""

from __future__ import annotations

import pytest

from kforge_mcp.devices.device import Device, get_device
from kforge_mcp.judge.device_guard import FINDING_CODE, DeviceGuard, changes, state_finding
from kforge_mcp.judge.timing import time_interleaved
from kforge_mcp.runtime.worker import device_state_left

CLEAN = {"persisting_l2_limit": 0, "stack_size_limit": 1024, "access_policy_window": {"num_bytes": 0}}


def test_the_cpu_has_nothing_to_guard():
    cpu = get_device("cpu")
    assert cpu.snapshot() == {} and cpu.restore({}) == []
    assert cpu.guarded_state.startswith("nothing")
    guard = DeviceGuard("cpu")
    guard.settle()
    assert guard.finding() is None
    assert device_state_left("cpu", {}) is False


def test_each_device_kind_says_what_it_guards():
    assert "persisting-L2" in get_device("cuda:0").guarded_state
    assert "no persisting-L2" in get_device("xpu:0").guarded_state  # what SYCL does not expose, said plainly
    assert get_device("mps").guarded_state.startswith("nothing")


def test_a_pinned_l2_is_suspicious_and_names_what_changed():
    after = {**CLEAN, "persisting_l2_limit": 47185920, "access_policy_window": {"num_bytes": 33554432}}
    changed = changes(CLEAN, after)
    assert set(changed) == {"persisting_l2_limit", "access_policy_window"}
    assert changed["persisting_l2_limit"] == {"before": 0, "after": 47185920}
    f = state_finding(changed, [], "cuda:0")
    assert f.code == FINDING_CODE and f.severity == "suspicious"
    assert "persisting-L2" in f.message and "access policy window" in f.message and "put back" in f.message
    assert f.evidence["moves_timings"] == ["persisting_l2_limit", "access_policy_window"]


def test_a_change_that_moves_no_timing_is_reported_but_not_suspicious():
    f = state_finding(changes(CLEAN, {**CLEAN, "stack_size_limit": 4096}), [])
    assert f.severity == "info" and "stack size" in f.message
    assert state_finding(changes(CLEAN, dict(CLEAN)), []) is None


def test_state_that_cannot_be_put_back_is_suspicious_and_says_the_worker_goes():
    f = state_finding(changes(CLEAN, {**CLEAN, "stack_size_limit": 4096}), ["stack_size_limit"])
    assert f.severity == "suspicious" and "worker is replaced" in f.message


class Registers(Device):
    """A device whose state is a few registers a candidate writes; ``stuck`` ones refuse to be put back."""

    kind = "test"

    def __init__(self, stuck=()):
        super().__init__("test")
        self.regs, self.stuck = dict(CLEAN), set(stuck)

    def snapshot(self):
        return dict(self.regs)

    def _put_back(self, before, changed):
        self.regs.update({k: before[k] for k in changed if k not in self.stuck})


def guard_on(device: Registers) -> DeviceGuard:
    guard = DeviceGuard("cpu")
    guard.device, guard.before = device, device.snapshot()
    return guard


def test_settle_records_the_first_change_and_puts_it_back():
    dev = Registers()
    guard = guard_on(dev)
    dev.regs["persisting_l2_limit"] = 1 << 20
    guard.settle()
    assert dev.regs == CLEAN  # put back before anything else runs
    dev.regs["persisting_l2_limit"] = 2 << 20
    guard.settle()
    assert guard.changed == {"persisting_l2_limit": {"before": 0, "after": 1 << 20}}
    assert guard.finding().severity == "suspicious" and guard.unrestored == []


def test_what_will_not_go_back_is_named_for_the_worker_to_be_replaced():
    dev = Registers(stuck={"stack_size_limit"})
    guard = guard_on(dev)
    dev.regs["stack_size_limit"] = 8192
    guard.settle()
    assert guard.unrestored == ["stack_size_limit"]
    assert guard.finding().evidence["unrestored"] == ["stack_size_limit"]


@pytest.mark.parametrize("budget", [0.002, 0.01])
def test_no_baseline_runs_between_a_candidate_batch_and_its_put_back(budget):
    """Real interleaved timing on the CPU: after every stretch of candidate calls (warm-up, each batch) the
    settle hook runs before any baseline is called."""
    log: list[str] = []

    def record(name):
        return lambda *a: log.append(name)

    fns = {"candidate": record("candidate"), "eager": record("eager"), "compiled": record("compiled")}
    time_interleaved(fns, "cpu", budget, settle={"candidate": lambda: log.append("settle")})
    assert log.count("settle") >= 2 and log[-1] != "candidate"
    for i, name in enumerate(log):
        if name in ("eager", "compiled"):
            last_candidate = max((j for j in range(i) if log[j] == "candidate"), default=-1)
            assert "settle" in log[last_candidate + 1 : i] or last_candidate == -1, log[: i + 1]


class Unreadable(Device):
    kind = "test"

    def snapshot(self):
        raise OSError("no CUDA runtime library (libcudart) could be loaded")


def test_a_device_whose_state_cannot_be_read_is_a_warning_not_a_crash(monkeypatch):
    from kforge_mcp.judge import device_guard

    monkeypatch.setattr(device_guard, "get_device", Unreadable)
    guard = DeviceGuard("test")
    guard.settle()
    f = guard.finding()
    assert f.code == "device_state_unchecked" and f.severity == "warning" and "libcudart" in f.message
