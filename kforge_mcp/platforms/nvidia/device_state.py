"""The device-wide CUDA state a candidate can change and leave behind for what runs after it, read and
put back through the CUDA runtime that torch loaded (ctypes; torch has no API for limits, stream
attributes or the persisting L2).

What is read: the limits (the persisting-L2 set-aside, the L2 fetch granularity, stack, malloc heap and
printf FIFO sizes), the timed stream's access policy window and priority, the device's cache and
shared-memory configuration, the current device and stream. Each is a plain value (numbers, a dict
for the window), so snapshots compare with ``==`` and go into a finding's evidence as they are.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from typing import Any

# cudaLimit
LIMITS = {
    "stack_size_limit": 0x00,
    "printf_fifo_limit": 0x01,
    "malloc_heap_limit": 0x02,
    "l2_fetch_granularity_limit": 0x05,
    "persisting_l2_limit": 0x06,
}
ATTR_ACCESS_POLICY_WINDOW = 1  # cudaLaunchAttributeAccessPolicyWindow (= cudaStreamAttributeAccessPolicyWindow)
ATTR_PRIORITY = 8  # cudaLaunchAttributePriority


class AccessPolicyWindow(ctypes.Structure):
    _fields_ = [
        ("base_ptr", ctypes.c_void_p),
        ("num_bytes", ctypes.c_size_t),
        ("hitRatio", ctypes.c_float),
        ("hitProp", ctypes.c_int),
        ("missProp", ctypes.c_int),
    ]


class AttrValue(ctypes.Union):
    """cudaStreamAttrValue (cudaLaunchAttributeValue): padded to 64 bytes by the runtime's header."""

    _fields_ = [("window", AccessPolicyWindow), ("priority", ctypes.c_int), ("pad", ctypes.c_char * 64)]


class CudaRuntimeError(RuntimeError):
    pass


_streams: dict[int, Any] = {}  # handle -> the torch stream object a snapshot found current (to make it current again)


@functools.cache
def runtime() -> ctypes.CDLL:
    """The libcudart torch loaded (the same instance, so its last-error slot is the one torch checks)."""
    import torch

    torch.cuda.init()
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "/libcudart.so" in line}
    for path in sorted(paths) + ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]:
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    raise CudaRuntimeError("no CUDA runtime library (libcudart) could be loaded")


def _call(name: str, *args) -> None:
    lib = runtime()
    fn = getattr(lib, name)  # AttributeError: this runtime has no such call (removed in a newer CUDA)
    err = fn(*args)
    if err:
        lib.cudaGetLastError()  # ours, not the candidate's: never leave it for torch's next launch check
        raise CudaRuntimeError(f"{name} returned CUDA error {err}")


def _stream_attr(stream: int, attr: int) -> AttrValue:
    value = AttrValue()
    _call("cudaStreamGetAttribute", ctypes.c_void_p(stream), ctypes.c_int(attr), ctypes.byref(value))
    return value


def _window(stream: int) -> dict:
    w = _stream_attr(stream, ATTR_ACCESS_POLICY_WINDOW).window
    return {
        "base_ptr": w.base_ptr or 0,
        "num_bytes": w.num_bytes,
        "hit_ratio": round(w.hitRatio, 6),
        "hit_prop": w.hitProp,
        "miss_prop": w.missProp,
    }


def _set_window(stream: int, window: dict) -> None:
    value = AttrValue()
    value.window = AccessPolicyWindow(
        window["base_ptr"], window["num_bytes"], window["hit_ratio"], window["hit_prop"], window["miss_prop"]
    )
    _call(
        "cudaStreamSetAttribute", ctypes.c_void_p(stream), ctypes.c_int(ATTR_ACCESS_POLICY_WINDOW), ctypes.byref(value)
    )


def _get_int(name: str) -> int:
    out = ctypes.c_int()
    _call(name, ctypes.byref(out))
    return out.value


def snapshot(index: int) -> dict[str, Any]:
    """The state of device ``index`` and of torch's current stream on it. A value the runtime does not
    expose (a call removed from it) is left out, and so is neither compared nor restored."""
    import torch

    state: dict[str, Any] = {"current_device": torch.cuda.current_device()}
    with torch.cuda.device(index):
        current = torch.cuda.current_stream(index)
        stream = state["current_stream"] = current.cuda_stream
        _streams[stream] = current
        for name, limit in LIMITS.items():
            out = ctypes.c_size_t()
            try:
                _call("cudaDeviceGetLimit", ctypes.byref(out), ctypes.c_int(limit))
            except (AttributeError, CudaRuntimeError):
                continue  # e.g. no persisting L2 before Ampere
            state[name] = out.value
        for name, read in (
            ("access_policy_window", lambda: _window(stream)),
            ("stream_priority", lambda: _stream_attr(stream, ATTR_PRIORITY).priority),
            ("cache_config", lambda: _get_int("cudaDeviceGetCacheConfig")),
            ("shared_mem_config", lambda: _get_int("cudaDeviceGetSharedMemConfig")),  # gone from CUDA 13
        ):
            try:
                state[name] = read()
            except (AttributeError, CudaRuntimeError):
                continue
    return state


def restore(index: int, before: dict[str, Any], changed: set[str]) -> None:
    """Put back the ``changed`` names of ``before``, and turn every persisting L2 line back into a normal
    one (a candidate that raised the set-aside and lowered it again within its call leaves them, unseen).
    Raises nothing: the caller reads the state again to see what stayed changed."""
    import torch

    steps: list = []
    stream: int = before.get("current_stream", 0)
    with torch.cuda.device(index):
        if "current_stream" in changed and stream in _streams:
            steps.append(functools.partial(torch.cuda.set_stream, _streams[stream]))
        if "access_policy_window" in changed:
            steps.append(functools.partial(_set_window, stream, before["access_policy_window"]))
        if "stream_priority" in changed:
            value = AttrValue()
            value.priority = before["stream_priority"]
            attr = (ctypes.c_void_p(stream), ctypes.c_int(ATTR_PRIORITY), ctypes.byref(value))
            steps.append(functools.partial(_call, "cudaStreamSetAttribute", *attr))
        for name, limit in LIMITS.items():
            if name in changed:
                steps.append(
                    functools.partial(_call, "cudaDeviceSetLimit", ctypes.c_int(limit), ctypes.c_size_t(before[name]))
                )
        if "persisting_l2_limit" in before:
            steps.append(functools.partial(_call, "cudaCtxResetPersistingL2Cache"))
        for name, call in (
            ("cache_config", "cudaDeviceSetCacheConfig"),
            ("shared_mem_config", "cudaDeviceSetSharedMemConfig"),
        ):
            if name in changed:
                steps.append(functools.partial(_call, call, ctypes.c_int(before[name])))
        _run(steps)
    if "current_device" in changed:  # after the block above, which makes the device current on entry again
        _run([functools.partial(torch.cuda.set_device, before["current_device"])])


def _run(steps: list) -> None:
    for step in steps:
        with contextlib.suppress(Exception):  # what stays changed is seen by the next snapshot
            step()
