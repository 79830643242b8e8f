"""One profile, inside a worker: run the candidate (or the reference) under torch.profiler for
a few warm forwards (or the device's own timeline where torch.profiler does not see its kernels),
compute the reference's roofline, attach Triton compile metadata, and at depth "metrics" run the
forwards again under the device platform's metrics profiler (Nsight Compute on NVIDIA, xctrace on Apple)
in a process of its own and merge what it saw. Proton, on request, also runs in its own process: one CUPTI
user per process.

The metrics profiler's process starts as the profile begins (EarlyCapture): it imports torch and builds its model
while this worker profiles the timeline, and waits for this worker's go (a file in the job's folder) before its
own warm-up, so the two never share the device while either measures. What the worker already knows is not
computed again (ProfileCache): the reference's roofline and levers per problem, device and peaks, and a candidate's
weight work per candidate, problem and device; nor is the weight work traced where no device kernels ran (its rule
reads device kernels). ``report.phases`` says where the time went.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kforge_mcp import platforms
from kforge_mcp.core.problem import build_models, load_problem, seed_everything
from kforge_mcp.core.process_env import child_environment
from kforge_mcp.core.profile import ProfileReport
from kforge_mcp.core.requests import ProfileRequest
from kforge_mcp.core.schemas import Roofline
from kforge_mcp.core.settings import Settings
from kforge_mcp.core.source import SourceRuntimeError
from kforge_mcp.devices.device import get_device
from kforge_mcp.judge.roofline import reference_roofline, with_measured
from kforge_mcp.judge.structure import reference_levers
from kforge_mcp.judge.timing import sync_device
from kforge_mcp.platforms.base import Platform, ProfiledRun, Profiler
from kforge_mcp.profiling.proton import report_from_hatchet
from kforge_mcp.profiling.spare import Spares
from kforge_mcp.profiling.torch_trace import FORWARD_MARK, report_from_trace
from kforge_mcp.profiling.weight_work import attach_weight_work
from kforge_mcp.targets import get_target

INPUT_SEED = 7
PROFILER_TIMEOUT_S = 300
RAW_MAX_BYTES = 16 * 1024 * 1024  # a raw profile kept as a resource: the worker's reply carries it once
GO_FILE = "metrics-go"  # the worker writes "go" (or "stop") here when the metrics profiler's program may run
TIMES_FILE = "metrics-times.json"  # the program's moments (runner.Times), for the report's phases


@dataclass
class ProfileCache:
    """What a worker keeps between profiles: the reference's roofline with its levers (no measured time) per
    (problem, device, device name, peaks), and a candidate's weight work per (candidate, problem, device)."""

    rooflines: dict[tuple, Roofline] = field(default_factory=dict)
    spares: Spares = field(default_factory=Spares)  # the metrics profiler's program launched ahead (spare.py)
    weight_work: dict[tuple, tuple[dict, dict, list[str]]] = field(default_factory=dict)


class Phases:
    """Seconds per step, into ``report.phases``."""

    def __init__(self, report: ProfileReport):
        self.report = report

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            phases = self.report.phases
            phases[name] = round(phases.get(name, 0.0) + time.perf_counter() - started, 4)


def device_name(device: str) -> str:
    return get_device(device).display_name()


def run_profile(
    req: ProfileRequest,
    progress: Callable[[str], None],
    workdir: Path,
    settings: Settings,
    cache: ProfileCache | None = None,
) -> ProfileReport:
    """``settings``: the worker's, handed to the profiled program (profiling/runner.py) in its spec."""
    import torch
    from torch.profiler import profile, record_function

    started = time.perf_counter()
    cache = cache if cache is not None else ProfileCache()
    target = get_target(req.target)
    device = req.device
    depth = req.depth
    iters = req.iterations
    warmup = warmup_forwards(req)
    problem = load_problem(req.problem, workdir)
    cand = req.candidate
    name = device_name(device)
    report = ProfileReport(
        source="torch.profiler",
        target=target.name if cand else "reference",
        device=device,
        device_name=name,
        execution=target.execution(device) if cand else "pytorch",
    )
    phase = Phases(report)
    platform = get_device(device).platform
    early = EarlyCapture.start(report, req, workdir, platform, settings, cache.spares) if depth == "metrics" else None
    try:
        progress("building the model")
        module = None
        try:
            with phase("build"):
                if cand is not None:
                    module = target.load(cand, device, workdir).module
                    _, model = build_models(problem, module, device, build_reference=False)
                else:
                    seed_everything(0)
                    model = problem.module.Model(*problem.init_inputs(device)).to(device)
        except SourceRuntimeError as e:
            report.errors.append(str(e))
            report.errors += [f"{d.file or ''}:{d.line or ''}: {d.message}" for d in e.diagnostics]
            report.seconds = time.perf_counter() - started
            return report
        inputs = problem.make_inputs(INPUT_SEED, device, on_device=True)

        activities = get_device(device).profiler_activities()
        with torch.no_grad():
            progress(f"warming up ({warmup} forwards)")
            with phase("warm_up"):
                for _ in range(warmup):
                    model(*inputs)  # JIT compiles happen here, outside the profile
                sync_device(device)
            progress(f"profiling {iters} forwards with torch.profiler")
            with phase("timeline"):
                t0 = time.perf_counter()
                with profile(activities=activities) as prof:
                    for _ in range(iters):
                        with record_function(FORWARD_MARK):
                            model(*inputs)
                    sync_device(device)
                wall_ms = (time.perf_counter() - t0) * 1e3 / iters
                trace = workdir / "trace.json"
                prof.export_chrome_trace(str(trace))
                text = trace.read_text()
        keep_raw(report, "trace.json", text)
        parsed = report_from_trace(text, "<torch.profiler trace>", forwards=iters)
        for key in (
            "kernels",
            "forwards",
            "forwards_inferred",
            "launches_per_forward",
            "device_ms_per_forward",
            "host_overhead_ms",
            "sm_count",
        ):
            setattr(report, key, getattr(parsed, key))
        report.notes += parsed.notes
        if report.sm_count is None:
            report.sm_count = get_device(device).sm_count()
        if report.execution == "triton-interpreter":
            report.notes.append(
                "Triton interpreter on CPU: there are no device kernels; times are CPU times of the "
                "interpreter and say nothing about a GPU"
            )
        if module is not None:
            target.profile_details(report, module, device)
            weight_work(
                report,
                cache,
                req,
                model,
                lambda: (inputs, problem.make_inputs(INPUT_SEED + 1, device, on_device=True)),
                phase,
            )
        with torch.no_grad(), phase("timeline"):
            platform.device_timeline(report, lambda: model(*inputs), iters)

        measured = report.device_ms_per_forward if report.device_kernels() else wall_ms
        progress("computing the roofline")
        with phase("roofline"):
            try:
                report.roofline = with_measured(reference_bound(cache, problem, device, name, req), measured)
                if not report.device_kernels():
                    report.roofline.notes.append("measured_ms is host wall time per forward (no device kernels)")
            except Exception as e:  # noqa: BLE001
                report.notes.append(f"roofline unavailable: {type(e).__name__}: {e}")
        if early is not None:
            early.go()  # this worker is done with the device (the roofline runs the reference there too)

        if early is not None:
            progress(f"waiting for {early.profiler.title}")
            with phase("metrics"):
                early.finish(report)
        elif depth == "metrics":
            _no_metrics(report, req, platform)
        if req.proton:
            if platform.proton:
                progress("re-running under proton")
                with phase("proton"):
                    _merge_proton(report, req, workdir, settings)
            else:
                report.notes.append(f"proton does not see the kernels of {platform.title} ({device})")
    finally:
        if early is not None:
            early.stop()  # a profile that ended early: the waiting program exits unprofiled
    report.seconds = time.perf_counter() - started
    return report


def reference_bound(cache: ProfileCache, problem, device: str, name: str, req: ProfileRequest) -> Roofline:
    """The reference's roofline and levers without a measured time: computed once per problem, device and peaks
    in this worker (it runs the reference's code), a copy handed out each time."""
    key = (problem.source.digest, device, name, json.dumps(req.peaks, sort_keys=True))
    if key not in cache.rooflines:
        cache.rooflines[key] = reference_levers(
            problem, device, reference_roofline(problem, device, name, None, req.peaks)
        )
    return cache.rooflines[key].model_copy(deep=True)


def weight_work(report: ProfileReport, cache: ProfileCache, req: ProfileRequest, model, draw, phase: Phases) -> None:
    """Which kernels work on the weights alone (two forwards compared), where a rule can read it: device kernels
    ran. Traced once per candidate, problem and device in this worker."""
    target = get_target(req.target)
    if target.launch_counter() is None or not report.device_kernels() or req.candidate is None:
        return
    key = (req.candidate.digest, req.problem.digest, req.device)
    if key not in cache.weight_work:
        traced = ProfileReport()
        with phase("weight_work"):
            inputs, other = draw()
            attach_weight_work(traced, model, inputs, other, target.launch_counter)
        cache.weight_work[key] = (traced.weight_work, traced.weights_read, traced.notes)
    work, read, notes = cache.weight_work[key]
    report.weight_work, report.weights_read = dict(work), {k: list(v) for k, v in read.items()}
    report.notes += notes


class EarlyCapture:
    """The platform's metrics profiler capturing on a thread of its own from the start of the profile. Its program
    (profiling/runner.py) loads the problem and builds the model meanwhile, then waits for GO_FILE: ``go`` once
    this worker no longer uses the device, ``stop`` where the profile ended before."""

    def __init__(
        self,
        report: ProfileReport,
        req: ProfileRequest,
        workdir: Path,
        profiler: Profiler,
        settings: Settings,
        spares: Spares,
    ):
        self.profiler, self.signal, self.times = profiler, workdir / GO_FILE, workdir / TIMES_FILE
        self.started = self.ended = 0.0  # wall clock: the profiler's process launched, and returned
        self.captured: ProfileReport | None = None
        self.run = ProfiledRun(
            workdir=workdir,
            iterations=req.iterations,
            warmup=warmup_forwards(req),
            metrics=req.metrics,
            timeout_s=req.ncu_timeout_s or PROFILER_TIMEOUT_S,
            runner=lambda mode, extra: _runner(
                req,
                workdir,
                mode,
                {
                    **extra,
                    "go_file": str(self.signal),
                    "go_timeout_s": self.run.timeout_s,
                    "times_file": str(self.times),
                },
                settings,
            ),
            run=lambda cmd, timeout: _run(cmd, workdir, timeout, spares if settings.profile_spare_on else None),
            keep_raw=lambda name, text: keep_raw(report, name, text),
        )
        self.thread = threading.Thread(target=self._capture, name="kforge-metrics-capture", daemon=True)

    @classmethod
    def start(
        cls,
        report: ProfileReport,
        req: ProfileRequest,
        workdir: Path,
        platform: Platform,
        settings: Settings,
        spares: Spares,
    ) -> EarlyCapture | None:
        """Started where the platform has a metrics profiler that can run here; else None (``_no_metrics`` says
        why)."""
        profiler = platform.metrics_profiler()
        if profiler is None or profiler.missing():
            return None
        early = cls(report, req, workdir, profiler, settings, spares)
        early.thread.start()
        return early

    def _capture(self) -> None:
        self.started = time.time()
        try:
            self.captured = self.profiler.capture(self.run)
        except Exception as e:  # noqa: BLE001  (the profile stands without the metrics, and says why)
            self.run.notes.append(f"{self.profiler.title} failed: {type(e).__name__}: {e}")
        self.ended = time.time()

    def _profiler_phases(self, report: ProfileReport) -> None:
        """Where the profiler's own process spent its time (it runs beside the worker's phases, so these overlap
        them): metrics_profiler_ready, from its launch to its model built; _forward, from the go to the profiled
        forward's end (the warm-up, the forward and the profiler's replays); _exit, from there to its return."""
        try:
            seen = json.loads(self.times.read_text())
        except (OSError, ValueError):
            return
        spans = {"ready": (self.started, seen.get("ready")), "forward": (seen.get("go"), seen.get("done"))}
        spans["exit"] = (seen.get("done"), self.ended)
        for name, (a, b) in spans.items():
            if a and b and b >= a:
                report.phases[f"metrics_profiler_{name}"] = round(b - a, 4)

    def _say(self, word: str) -> None:
        if not self.signal.exists():
            tmp = self.signal.with_suffix(".tmp")
            tmp.write_text(word)
            os.replace(tmp, self.signal)  # whole, never half-written

    def go(self) -> None:
        self._say("go")

    def stop(self) -> None:
        self._say("stop")
        self.thread.join(timeout=self.run.timeout_s + 30)

    def finish(self, report: ProfileReport) -> None:
        """Wait for the capture and put what it saw on the timeline."""
        self.go()
        self.thread.join(timeout=self.run.timeout_s + 30)
        report.notes += self.run.notes
        self._profiler_phases(report)
        if self.captured is not None:
            self.profiler.merge(report, self.captured)


def _no_metrics(report: ProfileReport, req: ProfileRequest, platform: Platform) -> None:
    """Depth 'metrics' where no metrics profiler can run: say why."""
    profiler = platform.metrics_profiler()
    if profiler is None:
        report.notes.append(
            f"depth 'metrics' needs a metrics profiler ({platforms.metrics_profilers()}); {req.device} "
            f"({platform.title}) has only the timeline"
        )
        return
    report.notes.append(f"depth 'metrics': {profiler.missing()}; only the timeline was captured")


def warmup_forwards(req: ProfileRequest) -> int:
    """Forwards before the profiled ones: one on the CPU (the interpreter is slow), else two."""
    return req.warmup if req.warmup is not None else (1 if req.device == "cpu" else 2)


def _runner(req: ProfileRequest, workdir: Path, mode: str, extra: dict, settings: Settings) -> list[str]:
    """The profiled program's command line: the runner in ``mode`` (a profiler's name) with its spec."""
    return runner_argv(_runner_spec(req, workdir, mode, extra, settings))


def runner_argv(spec: Path) -> list[str]:
    return [sys.executable, "-m", "kforge_mcp.profiling.runner", str(spec)]


def profiled_environment() -> dict[str, str]:
    """The profiled program's environment: the worker's, scrubbed (no interpreter switch: it runs on a device)."""
    return child_environment(drop=("TRITON_INTERPRET",))


def _runner_spec(req: ProfileRequest, workdir: Path, mode: str, extra: dict, settings: Settings) -> Path:
    spec = {
        "settings": settings.variables(),  # the worker's: the program's registries are found from them
        "problem": req.problem.to_wire(),
        "candidate": req.candidate.to_wire() if req.candidate else None,
        "target": req.target,
        "device": req.device,
        "warmup": warmup_forwards(req),
        "mode": mode,
        **extra,
    }
    path = workdir / f"{mode}-spec.json"
    path.write_text(json.dumps(spec))
    return path


def _run(cmd: list[str], workdir: Path, timeout: float, spares: Spares | None = None) -> subprocess.CompletedProcess:
    """``cmd`` in the job's folder; with ``spares``, by the program launched ahead for it where one waits, and a
    program left waiting for the next capture either way."""
    env = profiled_environment()
    try:
        handed = spares.hand(cmd, timeout) if spares is not None else None
        return handed or subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        if spares is not None:
            spares.leave(cmd, env)


def keep_raw(report: ProfileReport, name: str, text: str) -> None:
    """The profiler's own file, for the tool to keep as a resource; past RAW_MAX_BYTES only a note."""
    if len(text) > RAW_MAX_BYTES:
        report.notes.append(f"{name} ({len(text) / 1e6:.1f} MB) is too large to keep as a resource")
    else:
        report.raw[name] = text


def _merge_proton(report: ProfileReport, req: ProfileRequest, workdir: Path, settings: Settings) -> None:
    name = str(workdir / "proton")
    try:
        proc = _run(
            _runner(req, workdir, "proton", {"proton_name": name, "iterations": req.iterations}, settings),
            workdir,
            PROFILER_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        report.notes.append("proton run timed out")
        return
    hatchet = Path(name + ".hatchet")
    if proc.returncode != 0 or not hatchet.is_file():
        report.notes.append(f"proton failed (exit {proc.returncode}): {(proc.stderr or '')[-400:].strip()}")
        return
    pr = report_from_hatchet(hatchet.read_text(), "<proton>", forwards=req.iterations)
    by_name = {k.name: k for k in report.kernels}
    for k in pr.kernels:
        if k.name in by_name:
            by_name[k.name].metrics["proton_mean_ms"] = k.mean_ms
    report.source += "+proton"
