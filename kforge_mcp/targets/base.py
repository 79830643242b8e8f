"""The Target contract: the only code that knows a kernel language lives behind it.

``probe`` and ``check`` run anywhere; ``compile`` and ``load`` run inside a worker only,
because both execute candidate code.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import types
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from kforge_mcp.core.problem import Source
from kforge_mcp.core.schemas import CompileReport, Diagnostic, Finding, TargetStatus
from kforge_mcp.core.settings import Settings
from kforge_mcp.devices.device import get_device


@dataclass
class Loaded:
    """A loaded candidate: its module, and what the report should say about how it was built (e.g.
    the CUDA build path). Returned, not kept on the target: one Target instance serves every job."""

    module: types.ModuleType
    findings: list[Finding] = field(default_factory=list)


def dist_version(dist: str) -> str | None:
    """An installed distribution's version, without importing it."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


class Target(ABC):
    """What every target implements. A subclass in a module of kforge_mcp/targets/ is found by the
    registry (targets/__init__.py); its prompt templates live in prompts/<name>/."""

    name: ClassVar[str]  # the name tools, the CLI and prompts/<name>/ use
    builds_ahead: ClassVar[bool] = False  # a build long next to its verify: CPU workers prebuild it
    summary: ClassVar[str]  # one line for list_targets
    title: ClassVar[str]  # how prompts name the language: "CUDA C++", "Triton"
    order: ClassVar[int] = 100  # place in list_targets (the shipped targets come first)
    requires: ClassVar[str | None] = None  # the resource a machine must have to run it ('metal'): executors route on it

    def __init__(self, settings: Settings):
        self.settings = settings  # the root's (targets/__init__.py makes every target with them)

    @abstractmethod
    def probe(self, devices: list[str]) -> TargetStatus:
        """Is this target usable here? ``devices`` are the torch devices the worker found."""

    @abstractmethod
    def check(self, source: Source) -> list[Finding]:
        """Static checks on candidate source (no execution)."""

    @abstractmethod
    def compile(self, source: Source, arch: str | None, problem: Source | None, workdir: Path) -> CompileReport:
        """Compile without running kernels. Inside a worker."""

    @abstractmethod
    def load(self, source: Source, device: str, workdir: Path) -> Loaded:
        """Build (or import) the candidate so that its kernels run on ``device``, and say how. Inside a worker."""

    def prebuild(self, source: Source, device: str, workdir: Path) -> list:
        """Build what ``load`` would build for ``device`` without importing it (a CPU worker, ahead of
        the GPU verify); the default: nothing to build ahead."""
        return []

    @abstractmethod
    def execution(self, device: str) -> str:
        """How kernels run on ``device``: 'cuda', 'xpu', 'triton-interpreter', ..."""

    def launch_counter(self) -> contextlib.AbstractContextManager | None:
        """A context whose value has ``.count``, the launches of the candidate's own kernels inside
        it; None (the default): the target is not checked for 'no kernel launched'."""
        return None

    def emulate_precision(self, device: str) -> contextlib.AbstractContextManager:
        """A context in which the candidate's kernels round as they would on the GPU (e.g. TF32
        operands where an interpreter computes fp32); its value may have ``findings()``, saying what
        was emulated or not checked. Default: nothing to emulate."""
        return contextlib.nullcontext()

    def profile_details(self, report, module: types.ModuleType, device: str) -> None:  # noqa: B027  (optional: nothing by default)
        """Add what only this target knows to a profile (e.g. Triton's compiled metadata)."""

    def static_diagnostics(self, source: Source) -> list[Diagnostic]:
        """What can be said about a candidate without a device, for a target that cannot compile
        here (e.g. Metal's signature checks off a Mac). Runs no submitted code."""
        return []

    def prompt_facts(self, status: TargetStatus) -> list[str]:
        """Sentences for the generation agent about how kernels run here (prompts' device facts)."""
        return []

    def cache_versions(self) -> dict[str, str]:
        """Versions of the toolchains whose change changes this target's compile output: part of
        the compile cache key (with torch's and kforge's)."""
        return {}


def device_resource(device: str | None) -> str | None:
    """The resource a device needs on the machine that runs the job: 'cuda', 'xpu', 'metal'
    (mps), or None for the CPU. Executors route on this and on a target's ``requires``."""
    return get_device(device).resource


def xpu_unavailable_reason() -> str | None:
    """Why Triton cannot run on an Intel GPU here, naming what is needed; None when it can."""
    from kforge_mcp.devices.driver_probe import torch_build

    need = "needs an Intel GPU with the XPU build of torch (and pytorch-triton-xpu)"
    build = torch_build()
    if build is not None and "xpu" in build and not build["xpu"]:  # said without importing torch
        return f"{need}; torch {build['__version__']} is not an XPU build"
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
