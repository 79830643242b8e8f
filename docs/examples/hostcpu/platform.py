"""A minimal platform: the host CPU as a vendor of its own.

It shows the Platform contract (kforge_mcp/platforms/base.py) in one package; see docs/adding-a-target.md
("Adding a platform"). tests/test_adding_a_platform.py loads it through KFORGE_PLATFORMS and runs verify, profile
and analyze_profile through it. A shipped platform puts this package in kforge_mcp/platforms/.

What it says of the CPU: its device is named "Host CPU: <model>" (so its own peaks.toml prices the roofline),
depth 'metrics' times each forward with the host's clock in the profiled program and writes them to a CSV of
its own (which analyze_profile reads back), torch's intra-op thread count is device-wide state a candidate
can leave changed for every timing after it, and its vocabulary tells the analysis (advice/) which of its
profiles' pipes is the host's matrix unit.
"""

from __future__ import annotations

import platform
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kforge_mcp.core.profile import KernelProfile, ProfileParseError, ProfileReport
from kforge_mcp.platforms.base import Platform, ProfiledRun, Profiler, Vocabulary
from kforge_mcp.platforms.formats import ProfileFormat, busy_timeline

HEADER = "hostcpu wallclock 1"
FILE = "wallclock.csv"


def parse(text: str, name: str = "<wallclock>", forwards: int | None = None) -> ProfileReport:
    """The profiled program's CSV: the header line, 'device,<name>', then 'start_ms,duration_ms' per forward."""
    lines = text.strip().splitlines()
    if len(lines) < 3 or lines[0] != HEADER or not lines[1].startswith("device,"):
        raise ProfileParseError(f"{name}: not a {HEADER!r} file (its header and device lines are missing)")
    try:
        rows = [tuple(float(x) for x in line.split(",")) for line in lines[2:]]
    except ValueError:
        raise ProfileParseError(f"{name}: a row is not 'start_ms,duration_ms'") from None
    total = sum(d for _, d in rows)
    report = ProfileReport(
        source="wallclock",
        device="cpu",
        device_name=lines[1].removeprefix("device,"),
        kernels=[KernelProfile(name="forward", kind="cpu", launches=len(rows), device_ms=total, mean_ms=total / len(rows))],
        forwards=forwards or len(rows),
        device_ms_per_forward=total / (forwards or len(rows)),
        timeline=busy_timeline([(s, s + d) for s, d in rows]),
        file=None if name.startswith("<") else name,
    )
    return report


class Wallclock(Profiler):
    name = "wallclock"
    title = "the host's wall clock"
    formats = (
        ProfileFormat(
            "wallclock-csv",
            "hostcpu wallclock CSV",
            detect=lambda text, data: data is None and text.startswith(HEADER),
            parse=lambda text, data, name, forwards: parse(text, name, forwards),
        ),
    )

    def capture(self, run: ProfiledRun) -> ProfileReport | None:
        out = run.workdir / FILE
        try:
            proc = run.run(run.runner(self.name, {"iterations": run.iterations, "out": str(out)}), run.timeout_s)
        except subprocess.TimeoutExpired:
            run.notes.append(f"wallclock did not finish within {run.timeout_s:.0f} s")
            return None
        if proc.returncode != 0 or not out.is_file():
            run.notes.append(f"wallclock failed (exit {proc.returncode}): {(proc.stderr or '')[-400:].strip()}")
            return None
        text = out.read_text()
        run.keep_raw(FILE, text)
        return parse(text)

    def merge(self, report: ProfileReport, captured: ProfileReport) -> None:
        report.timeline = captured.timeline
        report.source += "+wallclock"
        report.notes.append(
            f"wallclock: {captured.device_ms_per_forward:.4g} ms per forward over {captured.forwards} forwards "
            "(the profiled program's clock)"
        )

    def in_runner(self, forward: Callable[[], object], synchronize: Callable[[], None], spec: dict) -> None:
        origin, rows = time.perf_counter(), []
        for _ in range(int(spec.get("iterations", 1))):
            start = time.perf_counter()
            forward()
            synchronize()
            rows.append(f"{(start - origin) * 1e3:.6f},{(time.perf_counter() - start) * 1e3:.6f}")
        Path(spec["out"]).write_text("\n".join([HEADER, f"device,{HostCpu().device_name(0)}", *rows]) + "\n")


class HostCpu(Platform):
    name = "hostcpu"
    title = "the host CPU (example)"
    kinds = ("cpu",)
    order = 0  # before the shipped CPU platform, which serves the same kind
    profilers = (Wallclock(),)
    metrics = "wallclock"
    # the words its profiles speak to the analysis: the pipe a profiler of the host's counters names its matrix
    # unit (AMX tiles) by is its tensor pipe (wallclock itself only times forwards)
    vocabulary = Vocabulary(tensor_pipes=("amx",), pipe_units={"amx": "amx"})
    guarded_state = "torch's intra-op thread count (torch.set_num_threads), which every timing after would run with"

    def identifies(self, kind: str, build: Mapping[str, Any]) -> bool:
        return kind == "cpu"

    def device_name(self, index: int) -> str | None:
        return f"Host CPU: {platform.processor() or platform.machine()}"

    def snapshot(self, index: int) -> dict[str, Any]:
        import torch

        return {"intra_op_threads": torch.get_num_threads()}

    def put_back(self, index: int, before: dict[str, Any], changed: set[str]) -> None:
        import torch

        if "intra_op_threads" in changed:
            torch.set_num_threads(before["intra_op_threads"])
