"""One torch device kind (cuda, xpu, mps, cpu) and everything the engine needs to know of it:
waiting for its work, its timing events and clock, poisoning freed memory, flushing its cache,
its name and state, what a machine needs to run it, and its platform (the vendor behind it, told
apart by torch's build: ROCm builds name AMD GPUs 'cuda' too), which says which profilers see its
kernels and what device-wide state a candidate can change (a snapshot, and putting it back).
Timing, verify, profile, guards and the executors ask a Device instead of branching on names.

torch is imported only when a device is used. The event class and synchronize of a kind are
bound the first time they are asked for (``bind_clocks``: before any candidate is imported), so a
candidate that patches ``torch.cuda.Event.record`` or ``synchronize`` cannot change what we read.
"""

from __future__ import annotations

import contextlib
import functools
import platform
from typing import Any, ClassVar

from kforge_mcp import platforms
from kforge_mcp.devices.driver_probe import torch_build
from kforge_mcp.platforms.base import Platform

L2_FLUSH_BYTES = 256 * 1024 * 1024
_bound: dict[str, tuple] = {}  # kind -> (torch module, Event class, synchronize), bound once
_flush_buffers: dict[str, Any] = {}


@functools.cache
def _build() -> dict:
    """torch's build (torch/version.py's constants), read once: what tells a ROCm build's 'cuda' from NVIDIA's."""
    return torch_build() or {}


class Device:
    """The CPU, and the defaults of a device without events (the host monotonic clock)."""

    kind: ClassVar[str] = "cpu"
    resource: ClassVar[str | None] = None  # what a machine must have to run jobs here ('cuda', 'xpu', 'metal')
    is_gpu: ClassVar[bool] = False

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"Device({self.name!r})"

    @property
    def platform(self) -> Platform:
        """The vendor behind this device: its profilers, peaks, compile checks and device-wide state."""
        return platforms.identify(self.kind, _build())

    @property
    def index(self) -> int:
        return int(self.name.split(":")[1]) if ":" in self.name else 0

    # ---- waiting and timing ----

    def api(self) -> tuple:
        """(torch module, Event class, synchronize) of this kind, bound once; Nones for the CPU."""
        return None, None, None

    def bind_clocks(self) -> None:
        """Bind the event class and synchronize now, before candidate code is imported."""
        self.api()

    def synchronize(self) -> None:
        """Wait for everything queued here (nothing to wait for on the CPU)."""
        _, _, synchronize = self.api()
        if synchronize is not None:
            synchronize()

    @property
    def has_events(self) -> bool:
        return self.api()[0] is not None

    def clock(self) -> str:
        return f"{self.kind} events, L2 flushed" if self.has_events else "host monotonic clock"

    def flush_buffer(self):
        """A buffer of L2_FLUSH_BYTES to write before each timed call (evicts the inputs from L2)."""
        import torch

        buf = _flush_buffers.get(self.name)
        if buf is None:
            buf = _flush_buffers[self.name] = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=self.name)
        return buf

    def spin(self, seconds: float) -> None:
        """Queue a kernel that keeps the device busy for about ``seconds`` (nothing here: no queue)."""

    # ---- guards ----

    def poison_free_memory(self) -> None:
        """Fill memory the allocator holds free with NaN, so an output never written cannot pass by luck."""

    @property
    def checks_streams(self) -> bool:
        """Whether work on another stream can be told apart (by the profiler) here."""
        return False

    # ---- profiling ----

    def profiler_activities(self) -> list:
        """torch.profiler activities that see this device's kernels (the CPU's always)."""
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU]

    def display_name(self) -> str:
        return self.platform.device_name(self.index) or self.name

    def sm_count(self) -> int | None:
        return None

    def state(self) -> dict:
        """What is known of the device's clocks while we timed."""
        return {}

    # ---- device-wide state a candidate can leave changed for what runs after it: the platform's ----

    @property
    def guarded_state(self) -> str:
        return self.platform.guarded_state

    def snapshot(self) -> dict[str, Any]:
        """That state now, as plain values (name -> value; compared with ==, reported as evidence)."""
        return self.platform.snapshot(self.index)

    def restore(self, before: dict[str, Any]) -> list[str]:
        """Put back what differs from ``before``; return the names that stay changed (empty: all went back)."""
        if not before:
            return []
        now = self.snapshot()
        self._put_back(before, {name for name, value in before.items() if now.get(name) != value})
        now = self.snapshot()
        return [name for name, value in before.items() if now.get(name) != value]

    def _put_back(self, before: dict[str, Any], changed: set[str]) -> None:
        self.platform.put_back(self.index, before, changed)


class _EventDevice(Device):
    """A GPU whose torch module has Event(enable_timing=True) and synchronize."""

    is_gpu = True

    def api(self) -> tuple:
        if self.kind not in _bound:
            import torch

            module = getattr(torch, self.kind, None)
            _bound[self.kind] = (module, module.Event, module.synchronize) if module is not None else (None,) * 3
        return _bound[self.kind]

    def state(self) -> dict:
        return {"name": self.display_name()}


class CudaDevice(_EventDevice):
    kind = "cuda"
    resource = "cuda"

    def spin(self, seconds: float) -> None:
        import torch

        # cycles at a 2 GHz clock: a slower clock only spins longer
        torch.cuda._sleep(int(min(seconds, 0.005) * 2e9))

    def poison_free_memory(self) -> None:
        """Best effort: the candidate running before the reference in each trial is the main defence."""
        import torch

        free = torch.cuda.memory_reserved(self.name) - torch.cuda.memory_allocated(self.name)
        if free < 4 or free > torch.cuda.mem_get_info(self.name)[0] // 2:
            return
        try:
            block = torch.empty(free // 4, dtype=torch.float32, device=self.name)
            block.fill_(float("nan"))
            del block
        except torch.cuda.OutOfMemoryError:
            pass
        torch.cuda.empty_cache()  # or the cache grows by what we just took, call after call

    @property
    def checks_streams(self) -> bool:
        return True

    def profiler_activities(self) -> list:
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]

    def display_name(self) -> str:
        import torch

        return self.platform.device_name(self.index) or torch.cuda.get_device_name(torch.device(self.name))

    def sm_count(self) -> int | None:
        import torch

        return torch.cuda.get_device_properties(torch.device(self.name)).multi_processor_count

    def state(self) -> dict:
        """NVML through torch when present."""
        import torch

        index = self.index
        state: dict = {"name": self.display_name()}
        with contextlib.suppress(Exception):
            state["sm_clock_mhz"] = torch.cuda.clock_rate(index)
        with contextlib.suppress(Exception):
            state["temperature_c"] = torch.cuda.temperature(index)
        return state


class XpuDevice(_EventDevice):
    kind = "xpu"
    resource = "xpu"

    def profiler_activities(self) -> list:
        from torch.profiler import ProfilerActivity

        extra = [ProfilerActivity.XPU] if hasattr(ProfilerActivity, "XPU") else []
        return [ProfilerActivity.CPU, *extra]

    def display_name(self) -> str:
        import torch

        return self.platform.device_name(self.index) or torch.xpu.get_device_name(torch.device(self.name))

    def state(self) -> dict:
        state: dict = {}
        with contextlib.suppress(Exception):
            state["name"] = self.display_name()
        return state


class MpsDevice(_EventDevice):
    kind = "mps"
    resource = "metal"

    def display_name(self) -> str:
        return self.platform.device_name(self.index) or "Apple GPU (MPS)"


KINDS: dict[str, type[Device]] = {d.kind: d for d in (CudaDevice, XpuDevice, MpsDevice, Device)}


def get_device(name: str | None) -> Device:
    """The Device for a torch device name ('cuda:1', 'xpu:0', 'mps', 'cpu'; None: the CPU)."""
    name = name or "cpu"
    return KINDS.get(name.split(":")[0], Device)(name)


def discover() -> tuple[list[str], dict[str, str]]:
    """The devices torch finds here (the CPU last) and a name for each."""
    import torch

    devices, names = [], {}
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            devices.append(f"cuda:{i}")
            names[f"cuda:{i}"] = torch.cuda.get_device_name(i)
            arch = get_device(f"cuda:{i}").platform.arch(*torch.cuda.get_device_capability(i))
            if arch:  # where the vendor names archs by torch's compute capability (sm_90a)
                names[f"cuda:{i}"] += f" ({arch})"
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        for i in range(xpu.device_count()):
            devices.append(f"xpu:{i}")
            names[f"xpu:{i}"] = xpu.get_device_name(i)
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():  # Apple GPU: one device, named "mps"
        devices.append("mps")
        names["mps"] = f"Apple GPU (MPS, {platform.machine()})"
    devices.append("cpu")
    names["cpu"] = platform.processor() or platform.machine()
    return devices, names
