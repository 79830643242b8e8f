"""NVIDIA GPUs: torch's 'cuda' devices on a CUDA (not ROCm) build of torch. Depth 'metrics' is Nsight Compute
(ncu) over one forward; its CSV pages and .ncu-rep files load in analyze_profile; proton sees the kernels; the
peaks are NVIDIA's datasheets (peaks.toml); a compile for an sm_ arch is checked against the arch's shared
memory per block; the CUDA runtime's device-wide state is guarded (device_state.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

from kforge_mcp.core.profile import KernelProfile, ProfileParseError, ProfileReport
from kforge_mcp.core.schemas import CompileReport, Diagnostic
from kforge_mcp.platforms.base import Platform, ProfiledRun, Profiler
from kforge_mcp.platforms.formats import ProfileFormat
from kforge_mcp.platforms.nvidia import device_state, ncu, ncu_rep
from kforge_mcp.platforms.nvidia.advice_terms import VOCABULARY
from kforge_mcp.platforms.nvidia.compile_checks import shared_memory_diagnostics, sm_arch
from kforge_mcp.platforms.nvidia.ncu_metrics import CORE_METRICS, PROFILE_METRICS, ncu_args

NCU_NOISE = re.compile(r"^==(PROF|WARNING|ERROR|INFO)==", re.MULTILINE)


def is_ncu_csv(text: str, data: Any) -> bool:
    """An ncu CSV page (after ncu's own ==PROF== lines and the program's output), or ncu's output without a
    table (its own error then says why)."""
    if data is not None:
        return False
    body, _ = ncu.strip_noise(text[:1_000_000])
    first_lines = "\n".join(text.lstrip()[:4096].splitlines()[:20])
    return body.startswith('"ID"') or NCU_NOISE.search(first_lines) is not None


class Ncu(Profiler):
    name = "ncu"
    title = "Nsight Compute (ncu)"
    formats = (
        ProfileFormat(
            "ncu-csv",
            "Nsight Compute CSV (--csv --page raw or details)",
            detect=is_ncu_csv,
            parse=lambda text, data, name, forwards: ncu.report_from_csv(text, name, forwards),
        ),
        ProfileFormat("ncu-rep", ".ncu-rep", suffix=".ncu-rep", read=ncu_rep.report_from_ncu_rep),
    )

    def missing(self) -> str | None:
        return None if shutil.which("ncu") else "ncu is not on PATH here"

    def capture(self, run: ProfiledRun) -> ProfileReport | None:
        """ncu over the profiled program: the raw metrics the rules read (ncu_metrics.PROFILE_METRICS), no section,
        one raw CSV page; if this ncu rejects a name, the core metrics alone."""
        failure = ""
        for metrics in (run.metrics, CORE_METRICS):
            try:
                proc = run.run(self.command(metrics) + run.runner(self.name, {}), run.timeout_s)
            except subprocess.TimeoutExpired:
                run.notes.append(f"ncu did not finish within {run.timeout_s:.0f} s; metrics skipped")
                return None
            try:
                captured = ncu.report_from_raw(proc.stdout, "<ncu stdout>", forwards=1)
            except ProfileParseError as e:
                failure = f"ncu (exit {proc.returncode}) gave no metrics: {e}; {(proc.stderr or '')[-600:].strip()}"
                continue
            run.keep_raw("ncu.csv", proc.stdout)
            return captured
        run.notes.append(failure)
        return None

    def command(self, metrics: list[str] | None) -> list[str]:
        return [
            "ncu",
            "--csv",
            "--page",
            "raw",
            "--profile-from-start",
            "off",
            *ncu_args(metrics or PROFILE_METRICS, ()),
        ]

    def merge(self, report: ProfileReport, captured: ProfileReport) -> None:
        """Put ncu's per-kernel metrics on the timeline's kernels: by exact name, then by launch order."""
        fields = [
            f
            for f in KernelProfile.model_fields
            if f not in ("name", "kind", "launches", "device_ms", "mean_ms", "launches_per_forward", "metrics")
        ]
        unmatched = list(report.device_kernels())
        for nk in captured.kernels:
            target = next((k for k in unmatched if k.name == nk.name), None) or (unmatched[0] if unmatched else None)
            if target is None:
                nk.launches_per_forward = nk.launches
                report.kernels.append(nk)
                continue
            unmatched.remove(target)
            for f in fields:
                v = getattr(nk, f)
                if v not in (None, [], {}):
                    setattr(target, f, v)
            target.metrics["ncu_mean_ms"] = nk.mean_ms
            target.metrics.update(nk.metrics)
        report.sm_count = captured.sm_count or report.sm_count
        report.source = "torch.profiler+ncu"
        report.notes.append(
            "ncu metrics are from one forward under ncu (clocks locked by ncu's default); device times are "
            "torch.profiler's"
        )

    def in_runner(self, forward: Callable[[], object], synchronize: Callable[[], None], spec: dict) -> None:
        import torch

        torch.cuda.profiler.start()  # ncu --profile-from-start off captures only this forward
        forward()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


class Nvidia(Platform):
    name = "nvidia"
    title = "NVIDIA"
    kinds = ("cuda",)
    order = 10
    profilers = (Ncu(),)
    metrics = "ncu"
    proton = True
    vocabulary = VOCABULARY
    guarded_state = (
        "the persisting-L2 set-aside and the L2 fetch granularity, the stack, malloc heap and printf FIFO limits, "
        "the timed stream's access policy window and priority, the cache and shared-memory configuration "
        "(where the runtime still has it), the current device and stream; persisting L2 lines are reset"
    )

    def identifies(self, kind: str, build: Mapping[str, Any]) -> bool:
        return kind == "cuda" and not build.get("hip")  # a ROCm build of torch names AMD GPUs 'cuda' too

    def arch(self, major: int, minor: int) -> str | None:
        return sm_arch(major, minor)

    def compiles_for(self, arch: str | None) -> bool:
        return arch is not None and re.fullmatch(r"(?:sm_|compute_)\d{2,3}[af]?", arch.strip().lower()) is not None

    def compile_diagnostics(self, report: CompileReport) -> list[Diagnostic]:
        return shared_memory_diagnostics(report)

    def snapshot(self, index: int) -> dict[str, Any]:
        return device_state.snapshot(index)

    def put_back(self, index: int, before: dict[str, Any], changed: set[str]) -> None:
        device_state.restore(index, before, changed)
