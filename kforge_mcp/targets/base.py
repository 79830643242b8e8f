"""The Target interface: the only code that knows a kernel language lives behind it.

``probe`` and ``check`` run anywhere; ``compile`` and ``load`` run inside a worker only,
because both execute candidate code.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import os
import shutil
import types
from pathlib import Path
from typing import Protocol

from ..problem import Source
from ..schemas import CompileReport, Finding, TargetStatus

BUNDLED_BY_TRITON = ("cuobjdump", "nvdisasm", "ptxas")


def dist_version(dist: str) -> str | None:
    """An installed distribution's version, without importing it."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _triton_bundled(name: str) -> str | None:
    spec = importlib.util.find_spec("triton") if name in BUNDLED_BY_TRITON else None
    if spec and spec.origin:
        bundled = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / name
        if bundled.exists():
            return str(bundled)
    return None


@functools.lru_cache(maxsize=None)
def find_tool(name: str, prefer_triton_bundle: bool = False) -> str | None:
    """A CUDA tool: the toolkit's (CUDA_HOME, CUDA_PATH, /usr/local/cuda), then PATH, then the copy
    Triton bundles. Triton asks for its bundle first, so its cubins meet the tools they came with."""
    if prefer_triton_bundle and _triton_bundled(name):
        return _triton_bundled(name)
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if base and Path(base, "bin", name).exists():
            return str(Path(base, "bin", name))
    return shutil.which(name) or _triton_bundled(name)


class Target(Protocol):
    name: str
    summary: str

    def probe(self, devices: list[str]) -> TargetStatus:
        """Is this target usable here? ``devices`` are the torch devices the worker found."""

    def check(self, source: Source) -> list[Finding]:
        """Static checks on candidate source (no execution)."""

    def compile(self, source: Source, arch: str | None, problem: Source | None, workdir: Path) -> CompileReport:
        """Compile without running kernels. Inside a worker."""

    def load(self, source: Source, device: str, workdir: Path) -> types.ModuleType:
        """Import the candidate so that its kernels run on ``device``. Inside a worker."""

    def execution(self, device: str) -> str:
        """How kernels run on ``device``: 'cuda', 'xpu', 'triton-interpreter', ..."""

    def launch_counter(self) -> contextlib.AbstractContextManager:
        """Optional: a context whose value has ``.count``, the launches of the candidate's own
        kernels inside it. Targets without one are not checked for 'no kernel launched'."""


class PlannedTarget:
    """A target the project names but has not built yet: it says so instead of pretending."""

    def __init__(self, name: str, summary: str, reason: str):
        self.name = name
        self.summary = summary
        self.reason = reason

    def probe(self, devices: list[str]) -> TargetStatus:
        return TargetStatus(name=self.name, available=False, reason=self.reason, notes=[self.summary])

    def check(self, source: Source) -> list[Finding]:
        return []

    def _unavailable(self):
        from ..errors import InputError

        raise InputError(f"target '{self.name}' is not available: {self.reason}")

    def compile(self, source, arch, problem, workdir):
        self._unavailable()

    def load(self, source, device, workdir):
        self._unavailable()

    def execution(self, device: str) -> str:
        return "unavailable"


def device_resource(device: str | None) -> str | None:
    """The resource a device needs on the machine that runs the job: 'cuda', 'xpu', 'metal'
    (mps), or None for the CPU. Executors route on this and on a target's ``requires``."""
    kind = (device or "cpu").split(":")[0]
    return {"cuda": "cuda", "xpu": "xpu", "mps": "metal"}.get(kind)


def xpu_unavailable_reason() -> str | None:
    """Why Triton cannot run on an Intel GPU here, naming what is needed; None when it can."""
    need = "needs an Intel GPU with the XPU build of torch (and pytorch-triton-xpu)"
    try:
        import torch
    except ImportError:
        return f"{need}; torch is not installed"
    xpu = getattr(torch, "xpu", None)
    if xpu is None or not hasattr(torch._C, "_xpu_getDeviceCount"):
        return f"{need}; torch {torch.__version__} is not an XPU build"
    if not xpu.is_available():
        return f"{need}; torch.xpu.is_available() is False here"
    return None
