"""The engine behind the tools, the CLI and the library: it checks arguments, picks a lane,
sends the job to a worker and turns whatever comes back (or doesn't) into a report."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from kforge_mcp.core.errors import InputError, KforgeError
from kforge_mcp.core.home import check_home
from kforge_mcp.core.options import BASELINES, PROFILE, VERIFY, check_precision
from kforge_mcp.core.problem import Source, check_allowed_path, default_allowed_roots
from kforge_mcp.core.problem import resolve_source as _resolve_source
from kforge_mcp.core.requests import CompileRequest, ProbeRequest, ProfileRequest, RooflineRequest, VerifyRequest
from kforge_mcp.core.schemas import CompileReport, Diagnostic, TargetsReport, TargetStatus, VerifyReport
from kforge_mcp.core.settings import Settings
from kforge_mcp.judge.pipeline import head_start_one, start_prebuilds, warm_batch_baselines
from kforge_mcp.runtime.cache import CompileCache
from kforge_mcp.runtime.executor import Executor, LocalExecutor
from kforge_mcp.runtime.pool import JobCancelled, WorkerFailure, WorkerPool
from kforge_mcp.runtime.probe_cache import KnownTargets
from kforge_mcp.targets import get_target

Progress = Callable[[str], None] | None
DEFAULT_TIMEOUT_S = VERIFY.timeout_s  # compile and the probe wait as long as a verify
PATHS_WAIT_S = 30.0  # a finished verify or profile waits this long at most for the paths' measurement


class Engine:
    def __init__(
        self,
        home: Path | str | None = None,
        memory_limit_mb: int | None = None,
        allow_dirs: Sequence[Path | str] | None = None,
        executor: Executor | None = None,
        settings: Settings | None = None,
    ):
        # the library's entry: KFORGE_* read once here (or given) and passed down
        self.settings = settings = settings or Settings.read()
        self.home = Path(home).expanduser() if home else settings.home
        # a problem or candidate given as a path must resolve under one of these
        self.allow_dirs = (
            [Path(d).expanduser().resolve() for d in allow_dirs] if allow_dirs is not None else default_allowed_roots()
        )
        check_home(self.home)  # read-only or full: a clear error naming the path, before any worker starts
        limit = memory_limit_mb or settings.worker_memory_mb
        # where worker jobs run: this machine's pool unless an executor (e.g. Ray) is given
        self.executor: Executor = executor or LocalExecutor(
            WorkerPool(self.home, memory_limit_mb=limit, settings=settings)
        )
        self.compile_cache = CompileCache(self.home / "cache" / "compile")
        # each problem's compute paths measured once per tolerance (judge/precision_paths.py)
        self.paths_cache = CompileCache(self.home / "cache" / "precision_paths", "the precision-paths cache")
        self._paths_pool: ThreadPoolExecutor | None = None
        self._paths_lock = threading.Lock()
        self._paths_running: dict[tuple, Future] = {}  # (problem, precision, atol, rtol) -> its measurement
        # a cluster's probe lists its live nodes: never answered from this machine's kept probe
        self.targets = KnownTargets(self.home, self._probe, kept=self.executor.name == "local")

    def resolve_source(self, value: str, role: str) -> Source:
        """Source text, or a .py path under the allowed directories (``allow_dirs``)."""
        return _resolve_source(value, role, self.allow_dirs)

    # ---- targets ----

    def list_targets(self, refresh: bool = False, on_progress: Progress = None) -> TargetsReport:
        return self.targets.get(refresh, on_progress)

    def _probe(self, on_progress: Progress = None) -> TargetsReport:
        reply = self.executor.run("compile", ProbeRequest(), timeout_s=DEFAULT_TIMEOUT_S, on_progress=on_progress)
        if not reply.get("ok"):
            raise KforgeError(f"probing targets failed: {reply.get('message')}")
        return TargetsReport.model_validate(reply["value"])

    def target_status(self, name: str) -> TargetStatus:
        get_target(name)  # unknown names fail here, with the list of known ones
        return next(t for t in self.list_targets().targets if t.name == name)

    def _pick_device(self, status: TargetStatus, device: str | None) -> str:
        if not status.available:
            raise InputError(f"target '{status.name}' is not available here: {status.reason}")
        if device is None:
            return status.devices[0]
        device = "cuda:0" if device == "cuda" else "xpu:0" if device == "xpu" else device
        missing = status.unavailable_devices.get(device.split(":")[0])
        if device not in status.devices and missing:  # a device kind the target supports, absent here
            raise InputError(f"device '{device}' is not available to target '{status.name}' here: {missing}")
        if device not in status.devices:
            raise InputError(
                f"device '{device}' is not available to target '{status.name}' here; "
                f"available: {', '.join(status.devices) or 'none'}"
            )
        return device

    # ---- compile ----

    def compile(
        self,
        target: str,
        source: str,
        arch: str | None = None,
        problem: str | None = None,
        emit_ptx: bool = False,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        on_progress: Progress = None,
        cancel: threading.Event | None = None,
    ) -> CompileReport:
        started = time.perf_counter()
        src = self.resolve_source(source, "source")
        prob = self.resolve_source(problem, "problem") if problem else None
        status = self.target_status(target)
        if not status.can_compile and not status.available:
            # checks that need no device (they run no submitted code) still come back, as diagnostics
            static = get_target(target).static_diagnostics(src)
            raise InputError(f"target '{target}' cannot compile here: {status.reason}", static or None)
        arch = arch or self.list_targets().host.get("arch")
        key = self.compile_cache.key(
            target=target,
            source=src.text,
            problem=prob.text if prob else None,
            arch=arch,
            emit_ptx=emit_ptx,
            toolchains=get_target(target).cache_versions(),
            checks="shared-memory-limit,mma",  # reports cached before these checks are not served
        )
        hit = self.compile_cache.get(key)
        if hit is not None:
            report = CompileReport.model_validate(hit)
            report.cached, report.seconds = True, time.perf_counter() - started
            return report
        request = CompileRequest(target=target, source=src, arch=arch, emit_ptx=emit_ptx, problem=prob)
        try:
            reply = self.executor.run("compile", request, timeout_s, on_progress, cancel)
        except JobCancelled:
            raise
        except WorkerFailure as e:
            return CompileReport(
                ok=False,
                target=target,
                arch=arch,
                seconds=time.perf_counter() - started,
                diagnostics=[_failure_diagnostic(e, src)],
            )
        report = self._reply_to_report(reply, CompileReport, src)
        if reply.get("ok"):
            try:
                self.compile_cache.put(key, report.model_dump(mode="json"))
            except KforgeError as e:  # a full or read-only home: the compile is still good, say why it is not cached
                report.diagnostics.append(Diagnostic(severity="warning", message=f"not cached: {e}"))
        else:
            report = CompileReport(
                ok=False,
                target=target,
                arch=arch,
                diagnostics=[Diagnostic(message=reply.get("message", "compile failed"), file=src.name)],
            )
        report.seconds = time.perf_counter() - started
        return report

    # ---- verify ----

    def verify(
        self,
        problem: str,
        candidate: str,
        target: str = "triton",
        device: str | None = None,
        trials: int = VERIFY.trials,
        atol: float | None = None,
        rtol: float | None = None,
        timeout_s: float = VERIFY.timeout_s,
        baselines: Sequence[str] = BASELINES,
        timing_budget_s: float = VERIFY.timing_budget_s,
        on_progress: Progress = None,
        cancel: threading.Event | None = None,
        precision: str | None = None,
        seed: int | None = None,
        head_start: bool = True,
        timing_sets: str = VERIFY.timing_sets,
    ) -> VerifyReport:
        """``head_start``: see pipeline.head_start_one (verify_batch starts its own). ``timing_sets``: 'main'
        times get_inputs() only; 'all' also each get_input_sets() shape, with its speedup and their geomean."""
        started = time.perf_counter()
        if not 1 <= trials <= 100:
            raise InputError(f"trials must be between 1 and 100, got {trials}")
        if timeout_s <= 0:
            raise InputError(f"timeout_s must be positive, got {timeout_s}")
        if timing_sets not in ("main", "all"):
            raise InputError(f"timing_sets must be 'main' or 'all', got {timing_sets!r}")
        check_precision(precision, atol, rtol, seed=seed)
        unknown = set(baselines) - set(BASELINES)
        if unknown:
            raise InputError(f"unknown baselines {sorted(unknown)}; choose from {list(BASELINES)}")
        prob = self.resolve_source(problem, "problem")
        cand = self.resolve_source(candidate, "candidate")
        dev = self._pick_device(self.target_status(target), device)
        request = VerifyRequest(
            problem=prob,
            candidate=cand,
            target=target,
            device=dev,
            trials=trials,
            atol=atol,
            rtol=rtol,
            precision=precision,
            seed=seed,
            baselines=list(baselines),
            timing_budget_s=timing_budget_s,
            timing_sets=timing_sets,
        )
        error = dict(verdict="error", correct=False, target=target, device=dev, trials=trials, seed=seed)
        error |= dict(execution=get_target(target).execution(dev), precision=precision)
        # the paths' errors are measured on the CPU while the device verifies (a GPU verify gets a bound)
        paths = self._paths_soon(prob, precision, atol, rtol, timeout_s) if dev != "cpu" else None
        try:
            if head_start:
                head_start_one(self, request, on_progress, cancel)
            reply = self.executor.run(dev, request, timeout_s, on_progress, cancel)
        except JobCancelled:
            raise
        except WorkerFailure as e:
            return VerifyReport(
                **error,
                errors=[e.message] + ([e.stderr_tail] if e.stderr_tail else []),
                diagnostics=[_failure_diagnostic(e, cand)],
                seconds=time.perf_counter() - started,
            )
        if not reply.get("ok") and reply.get("kind") == "internal":
            errors = [reply.get("message", ""), reply.get("traceback", "")]
            return VerifyReport(**error, errors=errors, seconds=time.perf_counter() - started)
        report = self._reply_to_report(reply, VerifyReport, cand)
        report.node = reply.get("node")  # where a cluster executor ran it
        if paths is not None and report.sol_ms is not None and report.timing is not None:
            self._bound_from_paths(report, paths, self._paths_deadline(started + timeout_s))
        return report

    def _bound_from_paths(self, report: VerifyReport, paths, deadline: float) -> None:
        """The verify's bound again, its path taken from the paths measured on the problem's inputs."""
        from kforge_mcp.judge.roofline import set_verify_bound
        from kforge_mcp.judge.structure import measured_roofline

        notes: list[str] = []
        m = self._paths_result(paths, deadline, notes)
        if m is not None and report.timing is not None and report.timing.candidate is not None:
            ms = report.timing.candidate.median_ms
            set_verify_bound(report, measured_roofline(m, report.device_state.get("name"), ms), ms)
        report.sol_path = "; ".join([report.sol_path or "", *notes]).strip("; ")

    def verify_batch(
        self,
        items: Sequence[dict],
        on_result: Callable[[int, VerifyReport], None] | None = None,
        on_progress: Progress = None,
        cancel: threading.Event | None = None,
        **common,
    ) -> list[VerifyReport]:
        """Verify many candidates, as many at once as the executor has workers for their lane.

        Each item holds ``verify`` arguments (at least problem and candidate); ``common`` fills
        what an item leaves out. ``on_result(index, report)`` is called as each one finishes, in
        completion order. A bad item becomes an ``error`` report naming what was wrong; it never
        stops the batch. Returns the reports in item order."""
        if not items:
            return []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not item.get("problem") or not item.get("candidate"):
                raise InputError(f"items[{i}]: needs 'problem' and 'candidate'")
        merged = [{**common, **item} for item in items]
        lanes = {self.lane_for(m.get("target", "triton"), m.get("device")) for m in merged}
        width = max(1, sum(self.executor.slots(lane) for lane in lanes))
        reports: list[VerifyReport | None] = [None] * len(merged)
        done_lock, done = threading.Lock(), [0]
        prebuilt = start_prebuilds(self, merged, on_progress, cancel)  # CPU workers build ahead of the GPU
        warm_batch_baselines(self, merged, on_progress, cancel)  # and meanwhile the GPU times the baselines

        def one(i: int) -> None:
            args = merged[i]
            prebuilt.wait(i)
            try:
                if cancel is not None and cancel.is_set():
                    raise JobCancelled()
                report = self.verify(**args, cancel=cancel, head_start=False)
            except JobCancelled:
                report = VerifyReport(verdict="error", correct=False, target=args.get("target"), errors=["cancelled"])
            except KforgeError as e:  # bad input for this item: its own verdict, not the batch's
                report = VerifyReport(verdict="error", correct=False, target=args.get("target"), errors=[str(e)])
            reports[i] = report
            with done_lock:
                done[0] += 1
                if on_progress:
                    on_progress(f"verified {done[0]}/{len(merged)}: item {i} {report.verdict}")
                if on_result:
                    on_result(i, report)

        with ThreadPoolExecutor(max_workers=min(width, len(merged)), thread_name_prefix="kforge-batch") as ex:
            list(ex.map(one, range(len(merged))))
        return reports  # type: ignore[return-value]

    def lane_for(self, target: str = "triton", device: str | None = None) -> str:
        """The lane a verify of this target on this device runs on ('invalid' when there is none:
        verify itself then says why)."""
        try:
            return self._pick_device(self.target_status(target), device)
        except KforgeError:
            return "invalid"

    def parallelism(self, target: str = "triton", device: str | None = None) -> int:
        """How many verifies of this target on this device the executor runs at once."""
        return max(1, int(self.executor.slots(self.lane_for(target, device))))

    # ---- profile and analyze ----

    def profile(
        self,
        problem: str,
        candidate: str | None = None,
        target: str = "triton",
        device: str | None = None,
        depth: str = PROFILE.depth,
        iterations: int = PROFILE.iterations,
        proton: bool = PROFILE.proton,
        peaks: dict | None = None,
        timeout_s: float = PROFILE.timeout_s,
        on_progress: Progress = None,
        cancel: threading.Event | None = None,
        device_model: str | None = None,
    ):
        """Profile the candidate (the reference when candidate is None): a ProfileReport. With
        ``device_model`` (a device of the peaks table, e.g. 'h200'), the roofline is that device's,
        marked as a model, from any machine."""
        from kforge_mcp.judge.roofline import table_device
        from kforge_mcp.profiling.report import ProfileReport

        started = time.perf_counter()
        model = table_device(device_model) if device_model else None  # a name the table lacks fails first
        if depth not in ("timeline", "metrics"):
            raise InputError(f"depth must be 'timeline' or 'metrics', got '{depth}'")
        if not 1 <= iterations <= 100:
            raise InputError(f"iterations must be between 1 and 100, got {iterations}")
        prob = self.resolve_source(problem, "problem")
        cand = self.resolve_source(candidate, "candidate") if candidate else None
        dev = self._pick_device(self.target_status(target), device)
        request = ProfileRequest(
            problem=prob,
            candidate=cand,
            target=target,
            device=dev,
            depth=depth,
            iterations=iterations,
            proton=proton,
            peaks=peaks,
        )
        paths = self._paths_soon(prob, None, None, None, timeout_s)  # measured on the CPU meanwhile
        try:
            reply = self.executor.run(dev, request, timeout_s, on_progress, cancel)
        except JobCancelled:
            raise
        except WorkerFailure as e:
            return ProfileReport(
                target=target,
                device=dev,
                errors=[e.message] + ([e.stderr_tail] if e.stderr_tail else []),
                seconds=time.perf_counter() - started,
            )
        report = self._reply_to_report(reply, ProfileReport, cand or prob)
        if report is None:  # the worker raised
            report = ProfileReport(
                target=target, device=dev, errors=[reply.get("message", ""), reply.get("traceback", "")]
            )
        if report.roofline is not None:
            m = self._paths_result(paths, self._paths_deadline(started + timeout_s), report.notes)
            if m is not None:
                from kforge_mcp.judge.structure import carry_levers, measured_roofline

                old, peaks = report.roofline, peaks or {}
                report.roofline = carry_levers(
                    measured_roofline(m, old.device, old.measured_ms, peaks.get("flops"), peaks.get("bandwidth")), old
                )
                report.roofline.notes += [n for n in old.notes if n not in report.roofline.notes]
        if model and not report.errors:
            try:
                report.roofline = self._modeled_roofline(problem, model, report, peaks, timeout_s)
            except KforgeError as e:  # the profile stands; say why the named device's bound is missing
                report.notes.append(f"no {model} roofline: {e}")
        if candidate and dev.startswith("cpu") and not report.errors:  # no GPU ran the kernels: advice reads the build
            report.compiled = self._compiled_for_advice(target, candidate, problem, model, report.notes, timeout_s)
        report.seconds = time.perf_counter() - started
        return report

    def _compiled_for_advice(self, target, candidate, problem, model, notes: list[str], timeout_s: float):
        """The candidate compiled for the device model's NVIDIA arch (the default arch without one): the registers,
        spills, warps, stages and MMA instructions the analysis reads where no GPU ran the kernels."""
        from kforge_mcp.advice.vocabulary import ARCH_BY_DEVICE

        if not self.target_status(target).can_compile:
            return None
        try:
            built = self.compile(target, candidate, ARCH_BY_DEVICE.get(model or ""), problem, timeout_s=timeout_s)
        except KforgeError as e:
            notes.append(f"not compiled for an NVIDIA arch ({e}): no advice from its registers or instructions")
            return None
        if not built.ok:
            first = built.diagnostics[0].message if built.diagnostics else "no diagnostic"
            notes.append(f"not compiled for {built.arch} ({first}): no advice from its registers or instructions")
            return None
        return built

    def _modeled_roofline(self, problem: str, model: str, report, peaks: dict | None, timeout_s: float):
        """The named device's roofline for the reference. The profile's measured time is set against it
        only when the profile ran on that very device; otherwise the bound stands alone."""
        from kforge_mcp.judge.roofline import table_device

        local = report.roofline
        try:
            here = table_device(report.device_name or "") if not (report.device or "cpu").startswith("cpu") else None
        except InputError:
            here = None
        measured = local.measured_ms if local is not None and here == model else None
        r = self.roofline(problem, device_name=model, measured_ms=measured, peaks=peaks, timeout_s=timeout_s)
        r.modeled = True
        where = "measured here on the same device" if measured else f"no time measured on {model} here"
        r.notes.append(f"a model: the {model} bound from its table peaks ({r.peaks_source}); {where}")
        return r

    def roofline(
        self,
        problem: str,
        device_name: str | None = None,
        measured_ms: float | None = None,
        peaks: dict | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        atol: float | None = None,
        rtol: float | None = None,
    ):
        """The reference's roofline, its compute paths measured on the problem's own inputs at the tolerance, and
        the levers of its structure (its FX graph, read in the same worker)."""
        from kforge_mcp.judge.structure import measured_roofline

        source = self.resolve_source(problem, "problem")
        m = self.measured_paths(source, None, atol, rtol, timeout_s)
        peaks = peaks or {}
        return measured_roofline(m, device_name, measured_ms, peaks.get("flops"), peaks.get("bandwidth"))

    def measured_paths(
        self,
        problem: Source,
        precision: str | None = None,
        atol: float | None = None,
        rtol: float | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        """Each compute path's max error on the problem's own inputs at the tolerance verify judges it at for
        these arguments: measured in a worker (the reference is code too) once per problem and tolerance,
        then kept under the home."""
        from kforge_mcp.judge.precision_paths import MeasuredPaths, code_digest

        key = self.paths_cache.key(
            kind="precision_paths", problem=problem.text, precision=precision, atol=atol, rtol=rtol, code=code_digest()
        )
        hit = self.paths_cache.get(key)
        if hit is not None:
            return MeasuredPaths.model_validate({**hit, "cached": True})
        request = RooflineRequest(problem=problem, measure_paths=True, precision=precision, atol=atol, rtol=rtol)
        try:
            reply = self.executor.run("compile", request, timeout_s)
        except WorkerFailure as e:
            raise KforgeError(f"measuring the compute paths: the worker failed: {e.message}") from None
        m = self._reply_to_report(reply, MeasuredPaths, problem)
        if m is None:
            raise KforgeError(f"measuring the compute paths failed: {reply.get('message')}")
        self.paths_cache.put(key, m.model_dump())
        return m

    def _paths_soon(self, problem: Source, precision, atol, rtol, timeout_s: float):
        """measured_paths on a thread of its own: a verify or profile runs meanwhile. Calls for the same problem
        and tolerance share one measurement (a batch of candidates measures its problem once)."""
        same = (problem.text, precision, atol, rtol)
        with self._paths_lock:
            if self._paths_pool is None:
                self._paths_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kforge-paths")
            self._paths_running = {k: f for k, f in self._paths_running.items() if not f.done()}  # done: cached
            if same in self._paths_running:
                return self._paths_running[same]
            future = self._paths_pool.submit(self.measured_paths, problem, precision, atol, rtol, timeout_s)
            self._paths_running[same] = future
            return future

    @staticmethod
    def _paths_deadline(call_deadline: float) -> float:
        """How long a finished verify or profile waits for its measurement: a little, never past its own deadline
        (a slow one finishes in the background and serves the next call from the cache)."""
        return min(call_deadline, time.perf_counter() + PATHS_WAIT_S)

    @staticmethod
    def _paths_result(future, deadline: float, notes: list[str]):
        """The measurement, waited for until the call's own deadline; a note in ``notes`` when there is none."""
        from concurrent.futures import TimeoutError as FutureTimeout

        try:
            return future.result(timeout=max(0.0, deadline - time.perf_counter()))
        except FutureTimeout:
            notes.append(
                "the compute paths are still being measured on the problem's inputs: this bound judges them by "
                "their rounding; the next call uses the measurement"
            )
        except Exception as e:  # noqa: BLE001  (a reference the emulation cannot run keeps the rounding model)
            notes.append(f"compute paths not measured ({type(e).__name__}: {e}): the bound judges them by rounding")
        return None

    def analyze_profile(
        self,
        profile: dict | None = None,
        path: str | None = None,
        image: str | None = None,
        problem: str | None = None,
        forwards: int | None = None,
        peaks: dict | None = None,
        max_bytes: int | None = None,
        atol: float | None = None,
        rtol: float | None = None,
    ):
        """Recommendations from a ProfileReport (dict), a captured file, or a screenshot: an AnalysisReport.
        Parsing runs here (it runs no submitted code); a problem's roofline is computed in a worker."""
        from kforge_mcp.advice import agent
        from kforge_mcp.core.profile import ProfileParseError
        from kforge_mcp.judge.roofline import with_measured
        from kforge_mcp.judge.structure import carry_levers
        from kforge_mcp.profiling import loader
        from kforge_mcp.profiling.report import ProfileReport

        given = [n for n, v in (("profile", profile), ("path", path), ("image", image)) if v]
        if len(given) != 1:
            raise InputError(
                "analyze_profile: pass exactly one of profile (a report), path (a captured file) or image"
                + (f"; got {', '.join(given)}" if given else "")
            )
        for role, value in (("path", path), ("image", image)):
            if value:
                check_allowed_path(value, role, self.allow_dirs)
        if image:
            if not Path(image).expanduser().is_file():
                raise InputError(f"image: file not found: {image}")
            return agent.analyze_image(image)
        if profile is not None:
            try:
                report = ProfileReport.model_validate(profile)
            except Exception as e:  # noqa: BLE001  (pydantic's message says which field)
                raise InputError(f"profile: not a ProfileReport: {str(e)[:600]}") from None
        else:
            assert path is not None  # exactly one of the three was given, neither profile nor image
            try:
                report = loader.load_profile(path, forwards=forwards, max_bytes=max_bytes or loader.MAX_BYTES)
            except ProfileParseError as e:
                raise InputError(str(e)) from None
        if problem:
            r = self.roofline(
                problem, device_name=report.device_name or report.device, peaks=peaks, atol=atol, rtol=rtol
            )
            earlier = report.roofline
            where = f"comes from the profile's roofline (checked on {earlier.device})" if earlier else None
            report.roofline = carry_levers(with_measured(r, report.device_ms_per_forward), earlier, where)
        return agent.analyze(report)

    @staticmethod
    def _reply_to_report(reply: dict, model, source: Source):
        if reply.get("ok"):
            return model.model_validate(reply["value"])
        if reply.get("kind") == "input":
            diags = [Diagnostic.model_validate(d) for d in reply.get("diagnostics", [])]
            raise InputError(reply.get("message", "invalid input"), diags)
        if reply.get("kind") == "internal":
            return None  # the caller turns it into its own failed report
        raise KforgeError(f"the worker sent an unexpected reply: {str(reply)[:300]}")

    @property
    def pool(self) -> WorkerPool | None:
        """The local worker pool (None when jobs run elsewhere)."""
        return getattr(self.executor, "pool", None)

    def close(self) -> None:
        if self._paths_pool is not None:
            self._paths_pool.shutdown(wait=False, cancel_futures=True)
        self.executor.shutdown()


def _failure_diagnostic(e: WorkerFailure, source: Source) -> Diagnostic:
    return Diagnostic(line=e.line, message=e.message, file=source.name if e.line else None)


_default: Engine | None = None
_default_lock = threading.Lock()


def default_engine() -> Engine:
    global _default
    with _default_lock:
        if _default is None:
            _default = Engine()
        return _default
