"""A minimal target: kernels written as NumPy functions, run on the CPU.

It shows the whole Target contract (kforge_mcp/targets/base.py) in one package; see
docs/adding-a-target.md. tests/test_adding_a_target.py loads it through KFORGE_TARGETS and runs a
candidate through compile and verify. A shipped target puts this package in kforge_mcp/targets/ and its
prompt templates in kforge_mcp/prompts/<name>/.

A candidate defines ``ModelNew`` whose forward hands NumPy arrays to functions marked
``@kernel`` (this module's decorator, which counts their calls as launches).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import types
from pathlib import Path

from kforge_mcp.core.problem import Source
from kforge_mcp.core.schemas import CompileReport, Diagnostic, Finding, TargetStatus
from kforge_mcp.core.source import import_source
from kforge_mcp.targets.base import Loaded, Target, dist_version

LAUNCHES = types.SimpleNamespace(count=0)


def kernel(fn):
    """Marks a NumPy function as a kernel of this target: each call counts as one launch."""

    @functools.wraps(fn)
    def launch(*args, **kwargs):
        LAUNCHES.count += 1
        return fn(*args, **kwargs)

    return launch


class NumpyTarget(Target):
    name = "numpy"
    summary = "NumPy functions as kernels, on the CPU (the example in docs/adding-a-target.md)"
    title = "NumPy"

    def probe(self, devices: list[str]) -> TargetStatus:
        version = dist_version("numpy")
        if version is None:
            return TargetStatus(name=self.name, available=False, reason="numpy is not installed")
        return TargetStatus(
            name=self.name, available=True, devices=["cpu"], can_compile=True, versions={"numpy": version}
        )

    def check(self, source: Source) -> list[Finding]:
        if "@kernel" not in source.text:
            return [Finding(code="no_numpy_kernel", message="the candidate defines no @kernel function")]
        return []

    def compile(self, source: Source, arch: str | None, problem: Source | None, workdir: Path) -> CompileReport:
        try:  # nothing to build: a syntax check is the whole compile
            ast.parse(source.text, filename=source.name)
        except SyntaxError as e:
            diagnostic = Diagnostic(line=e.lineno, column=e.offset, message=f"SyntaxError: {e.msg}", file=source.name)
            return CompileReport(ok=False, target=self.name, diagnostics=[diagnostic])
        return CompileReport(ok=True, target=self.name)

    def load(self, source: Source, device: str, workdir: Path) -> Loaded:
        return Loaded(import_source(source, workdir, "candidate"))

    def execution(self, device: str) -> str:
        return "numpy"

    def launch_counter(self) -> contextlib.AbstractContextManager:
        @contextlib.contextmanager
        def counting():
            start = LAUNCHES.count
            counted = types.SimpleNamespace(count=0)
            try:
                yield counted
            finally:
                counted.count = LAUNCHES.count - start

        return counting()
