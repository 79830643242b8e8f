"""The Target interface: the only code that knows a kernel language lives behind it.

``probe`` and ``check`` run anywhere; ``compile`` and ``load`` run inside a worker only,
because both execute candidate code.
"""

from __future__ import annotations

import contextlib
import types
from pathlib import Path
from typing import Protocol

from ..problem import Source
from ..schemas import CompileReport, Finding, TargetStatus


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
