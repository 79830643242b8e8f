"""Apple GPUs: torch's 'mps' device. torch.profiler does not see Metal kernels, so the timeline is MPS events
around each forward (inside torch.mps.profiler's signposts); depth 'metrics' records the forwards under
Instruments' Metal System Trace (xctrace) and reads its GPU intervals; the peaks are Apple's (peaks.toml)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

from kforge_mcp.core.profile import ProfileParseError, ProfileReport
from kforge_mcp.platforms.apple import xctrace
from kforge_mcp.platforms.base import Platform, ProfiledRun, Profiler
from kforge_mcp.platforms.formats import ProfileFormat

XCTRACE_XPATH = '/trace-toc/run[@number="1"]/data/table[@schema="metal-gpu-intervals"]'


class Xctrace(Profiler):
    name = "xctrace"
    title = "Instruments' xctrace (Xcode)"
    formats = (
        ProfileFormat(
            "xctrace",
            "xctrace export XML (metal-gpu-intervals)",
            detect=lambda text, data: data is None and xctrace.looks_like_xctrace(text),
            parse=lambda text, data, name, forwards: xctrace.report_from_xml(text, name, forwards),
        ),
    )

    def missing(self) -> str | None:
        return None if shutil.which("xcrun") else "Xcode's xctrace (xcrun) is not on PATH here"

    def capture(self, run: ProfiledRun) -> ProfileReport | None:
        """Record the forwards under Instruments' Metal System Trace and export its GPU intervals."""
        trace = run.workdir / "metal.trace"
        record = ["xcrun", "xctrace", "record", "--template", "Metal System Trace", "--output", str(trace)]
        record += ["--no-prompt", "--launch", "--", *run.runner(self.name, {"iterations": run.iterations})]
        export = ["xcrun", "xctrace", "export", "--input", str(trace), "--xpath", XCTRACE_XPATH]
        try:
            proc = run.run(record, run.timeout_s)
            if proc.returncode != 0 or not trace.exists():
                run.notes.append(
                    f"xctrace record failed (exit {proc.returncode}): {(proc.stderr or '')[-400:].strip()}"
                )
                return None
            proc = run.run(export, run.timeout_s)
        except subprocess.TimeoutExpired:
            run.notes.append("xctrace did not finish in time; metrics skipped")
            return None
        try:  # the recording holds the profiled program's warm-up forwards too
            return xctrace.report_from_xml(proc.stdout, "<xctrace export>", forwards=run.iterations + run.warmup)
        except ProfileParseError as e:
            run.notes.append(f"xctrace export gave no GPU intervals: {e}")
            return None

    def merge(self, report: ProfileReport, captured: ProfileReport) -> None:
        """Per-kernel device times and the busy/idle timeline come from the GPU intervals."""
        report.kernels = [k for k in report.kernels if k.kind != "device"] + captured.kernels
        report.timeline, report.launches_per_forward = captured.timeline, captured.launches_per_forward
        report.source += "+xctrace"
        report.notes += captured.notes

    def in_runner(self, forward: Callable[[], object], synchronize: Callable[[], None], spec: dict) -> None:
        import torch

        with torch.mps.profiler.profile(mode="interval", wait_until_completed=True):  # signposts mark each forward
            for _ in range(int(spec.get("iterations", 5))):
                forward()
        torch.mps.synchronize()


class Apple(Platform):
    name = "apple"
    title = "Apple"
    kinds = ("mps",)
    order = 40
    profilers = (Xctrace(),)
    metrics = "xctrace"
    guarded_state = (
        "nothing: torch.mps and Metal expose no device-wide state a candidate could change and leave "
        "(no limits, streams, cache configuration or L2 residency control)"
    )

    def device_timeline(self, report: ProfileReport, forward: Callable[[], object], iterations: int) -> None:
        """torch.profiler sees no Metal GPU work: time each forward with MPS events instead, inside
        torch.mps.profiler's signposts (so an Instruments recording shows each forward)."""
        import torch

        starts = [torch.mps.Event(enable_timing=True) for _ in range(iterations)]
        ends = [torch.mps.Event(enable_timing=True) for _ in range(iterations)]
        with torch.mps.profiler.profile(mode="interval", wait_until_completed=False):
            for s, e in zip(starts, ends):
                s.record()
                forward()
                e.record()
        torch.mps.synchronize()
        report.device_ms_per_forward = sum(s.elapsed_time(e) for s, e in zip(starts, ends)) / iterations
        report.notes.append(
            "mps: device time per forward from MPS events (torch.profiler does not see Metal kernels); "
            "per-kernel times need depth 'metrics' (xctrace)"
        )
