"""The Engine: the one facade the library, the tools and the CLI call. Each verb is a module of
kforge_mcp/engine/ over the parts they share (engine/parts.py: executor, caches, targets). A method here
takes a call's arguments as keywords, validates them once against the verb's model (core/options.py; an
InputError names the field) and hands the typed call on; the MCP tools, whose arguments the SDK has
validated against the same models, pass the model itself to the ``*_call`` methods."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kforge_mcp.core.errors import InputError, KforgeError
from kforge_mcp.core.options import DEFAULT_TARGET, DEFAULT_TIMEOUT_S, AnalyzeCall, CompileCall, ProfileCall, VerifyCall
from kforge_mcp.core.schemas import CompileReport, Roofline, VerifyReport
from kforge_mcp.core.source import Source
from kforge_mcp.engine import analyze, batch, profile, roofline, verify
from kforge_mcp.engine import compile as compiling  # the module, not the builtin
from kforge_mcp.engine.parts import EngineParts, Progress
from kforge_mcp.judge.precision_paths import MeasuredPaths
from kforge_mcp.profiling.report import AnalysisReport, ProfileReport

Cancel = threading.Event | None


class Engine(EngineParts):
    """``Engine(home=..., memory_limit_mb=..., allow_dirs=..., executor=..., settings=...)``; ``close()`` when done."""

    def compile(
        self,
        target: str,
        source: str | None = None,
        *,
        on_progress: Progress = None,
        cancel: Cancel = None,
        **options: Any,
    ) -> CompileReport:
        """Build a candidate's kernels without running them. ``options``: CompileCall's fields (arch, problem,
        emit_ptx, timeout_s)."""
        call = CompileCall.validated("compile", target=target, source=source, **options)
        return self.compile_call(call, on_progress, cancel)

    def compile_call(self, call: CompileCall, on_progress: Progress = None, cancel: Cancel = None) -> CompileReport:
        return compiling.compile_candidate(self, call, on_progress, cancel)

    def verify(
        self,
        problem: str,
        candidate: str,
        target: str = DEFAULT_TARGET,
        *,
        on_progress: Progress = None,
        cancel: Cancel = None,
        **options: Any,
    ) -> VerifyReport:
        """Check a candidate against its reference and time it. ``options``: VerifyCall's fields (device, trials,
        atol, rtol, precision, seed, timeout_s, baselines, timing_budget_s, timing_sets)."""
        call = VerifyCall.validated("verify", problem=problem, candidate=candidate, target=target, **options)
        return self.verify_call(call, on_progress, cancel)

    def verify_call(self, call: VerifyCall, on_progress: Progress = None, cancel: Cancel = None) -> VerifyReport:
        return verify.verify(self, call, on_progress, cancel)

    def verify_batch(
        self,
        items: Sequence[Mapping[str, Any]],
        on_result: Callable[[int, VerifyReport], None] | None = None,
        on_progress: Progress = None,
        cancel: Cancel = None,
        **common: Any,
    ) -> list[VerifyReport]:
        """Verify many candidates, as many at once as the executor has workers for their lane. Each item holds
        ``verify`` arguments (at least problem and candidate); ``common`` fills what an item leaves out. An item
        whose arguments are wrong becomes an ``error`` report naming what was wrong. See engine/batch.py."""
        for i, item in enumerate(items):
            if not isinstance(item, Mapping) or not item.get("problem") or not item.get("candidate"):
                raise InputError(f"items[{i}]: needs 'problem' and 'candidate'")
        return self.batch_call(
            [parsed(f"items[{i}]", {**common, **item}) for i, item in enumerate(items)], on_result, on_progress, cancel
        )

    def batch_call(
        self,
        calls: Sequence[batch.Item],
        on_result: Callable[[int, VerifyReport], None] | None = None,
        on_progress: Progress = None,
        cancel: Cancel = None,
    ) -> list[VerifyReport]:
        return batch.verify_batch(self, calls, on_result, on_progress, cancel)

    def profile(
        self,
        problem: str,
        candidate: str | None = None,
        target: str = DEFAULT_TARGET,
        *,
        peaks: dict[str, Any] | None = None,
        on_progress: Progress = None,
        cancel: Cancel = None,
        **options: Any,
    ) -> ProfileReport:
        """Profile the candidate (the reference when candidate is None). ``options``: ProfileCall's fields (device,
        depth, iterations, proton, timeout_s, device_model); ``peaks`` ({flops, bandwidth}) replace the table's."""
        call = ProfileCall.validated("profile", problem=problem, candidate=candidate, target=target, **options)
        return self.profile_call(call, peaks, on_progress, cancel)

    def profile_call(
        self,
        call: ProfileCall,
        peaks: dict[str, Any] | None = None,
        on_progress: Progress = None,
        cancel: Cancel = None,
    ) -> ProfileReport:
        return profile.profile(self, call, peaks, on_progress, cancel)

    def roofline(
        self,
        problem: str,
        device_name: str | None = None,
        measured_ms: float | None = None,
        peaks: dict[str, Any] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        atol: float | None = None,
        rtol: float | None = None,
    ) -> Roofline:
        """The reference's roofline on a device of the peaks table (engine/roofline.py)."""
        return roofline.roofline(self, problem, device_name, measured_ms, peaks, timeout_s, atol, rtol)

    def measured_paths(
        self,
        problem: Source,
        precision: str | None = None,
        atol: float | None = None,
        rtol: float | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> MeasuredPaths:
        """Each compute path's max error on the problem's inputs at the tolerance these arguments judge at."""
        return self.paths.measured(problem, (precision, atol, rtol), timeout_s)

    def analyze_profile(
        self,
        profile: dict[str, Any] | None = None,
        path: str | None = None,
        image: str | None = None,
        problem: str | None = None,
        *,
        peaks: dict[str, Any] | None = None,
        max_bytes: int | None = None,
        atol: float | None = None,
        rtol: float | None = None,
        **options: Any,
    ) -> AnalysisReport:
        """Recommendations from a ProfileReport (dict), a captured file, or a screenshot. ``options``:
        AnalyzeCall's other fields (forwards, device_model)."""
        call = AnalyzeCall.validated(
            "analyze_profile", profile=profile, path=path, image=image, problem=problem, **options
        )
        return self.analyze_call(call, peaks, max_bytes, atol, rtol)

    def analyze_call(
        self,
        call: AnalyzeCall,
        peaks: dict[str, Any] | None = None,
        max_bytes: int | None = None,
        atol: float | None = None,
        rtol: float | None = None,
    ) -> AnalysisReport:
        return analyze.analyze(self, call, peaks, max_bytes, atol, rtol)


def parsed(where: str, arguments: dict[str, Any]) -> batch.Item:
    """A batch item's VerifyCall, or why its arguments were refused (its own error report)."""
    try:
        return VerifyCall.validated(where, **arguments)
    except KforgeError as e:
        return e


_default: Engine | None = None
_default_lock = threading.Lock()


def default_engine() -> Engine:
    global _default
    with _default_lock:
        if _default is None:
            _default = Engine()
        return _default
