"""The verify's state and its guarded calls: the candidate's forward under the guards of judge/guards and the
reference's, each with the limit the server holds it to, the inputs of a call's sub-seeds, and the phases'
seconds."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.options import (
    CANDIDATE_CALL_SCALE,
    DEFAULT_TIMEOUT_S,
    FIRST_CALL_FLOOR_S,
    INTERPRETER_TRIAL_SCALE,
    TRIAL_FLOOR_S,
    TRIAL_SCALE,
)
from kforge_mcp.core.problem import LoadedProblem
from kforge_mcp.core.requests import BaselinesRequest
from kforge_mcp.core.schemas import Finding, VerifyReport
from kforge_mcp.core.source import diagnostics_from_exception
from kforge_mcp.devices.device import get_device
from kforge_mcp.judge import guards, precision
from kforge_mcp.judge.baselines import BaselineCache
from kforge_mcp.judge.correctness import compare_outputs
from kforge_mcp.judge.device_guard import DeviceGuard
from kforge_mcp.judge.lane_plan import LanePlan
from kforge_mcp.judge.timing import _perf_counter, sync_device
from kforge_mcp.runtime import refusals
from kforge_mcp.targets import get_target

# offsets of the sub-seeds drawn from a call's seed (seed * 2**20 + offset)
CORRECTNESS_SEED_BASE = 1000
RECHECK_SEED = 1999
DETERMINISM_SEED = 2999
INPUT_SETS_SEED = 3999
INPUT_SETS_TIMING_SEED = 20_000  # + a set's number * 2**12 + the timed call's number
TIMING_SEED_BASE = 10_000  # + the number of the timed call: every call gets inputs of its own
REFERENCE_TIME_SEED = 999


class CandidateFailed(Exception):
    """The candidate raised; the report already says where."""


# the share of the job's timeout a call's limit leaves to what comes before the verifier and after the call
JOB_MARGIN = 0.05


class OverBudget(Exception):
    """The calls a verdict needs cannot end before the timeout; the report already says why."""


def _clone(inputs: list) -> list:
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def describe_inputs(inputs: list) -> list[str]:
    """'8x128 float32' for a tensor, the type's name for anything else."""
    return [
        f"{'x'.join(map(str, x.shape)) or 'scalar'} {str(x.dtype).removeprefix('torch.')}"
        if hasattr(x, "shape") and hasattr(x, "dtype")
        else type(x).__name__
        for x in inputs
    ]


class VerifierState:
    """What every part of a verify reads: the request, the report, the judgement and the models, and one guarded
    call of each model."""

    problem: LoadedProblem
    module: ModuleType  # the candidate's
    reference: Any
    candidate: Any
    guard: DeviceGuard
    flags: precision.MathFlags

    def __init__(
        self, req: BaselinesRequest, progress: Callable[..., None], workdir: Path, cache: BaselineCache, memory_mb: int
    ):
        self.req, self.progress, self.workdir, self.cache = req, progress, workdir, cache
        self.memory_mb = memory_mb  # the worker's limit (KFORGE_WORKER_MEMORY_MB): the problem's inputs must fit
        self.target = get_target(req.target)
        self.device = req.device
        self.atol, self.rtol = req.atol, req.rtol
        trials = req.trials
        self.seed = req.seed if req.seed is not None else secrets.randbelow(2**31)
        self.report = VerifyReport(
            target=self.target.name,
            device=self.device,
            trials=trials,
            execution=self.target.execution(self.device),
            seed=self.seed,
        )
        self.trials = trials
        self.judge = precision.Judgement(req.precision, self.atol, self.rtol)
        self.reference_s: float | None = None  # the slowest forward of the reference seen
        self.candidate_s: float | None = None  # the slowest call of the candidate seen
        self.plan: LanePlan | None = None  # Triton's CPU interpreter: the instance and the calls that fit
        self.started = _perf_counter()
        self._inner: list[float] = []  # seconds of the phases inside each phase now running
        self.device_name = get_device(self.device).display_name()  # what kept baseline timings are keyed by
        self.timing_inputs: list = []  # the first timed call's inputs, drawn once the models are built
        self.timing_shapes: list[str] = []

    def step(self, message: str, first_call: bool = False) -> None:
        """Progress for a step that calls the candidate, with the limit the server holds it to."""
        limit, why = self.call_limit(first_call)
        self.progress(message, limit_s=limit, why=why)

    def call_limit(self, first_call: bool) -> tuple[float, str]:
        """A call's limit and why: the largest of what the work of the shapes that run gives (the reference's time
        scaled, the candidate's slowest call so far scaled, on the interpreter before any call the reference's work
        at the interpreter's slowest rate) and a floor; the floors grow with the job's timeout, so raising it raises
        every limit."""
        timeout = self.req.timeout_s
        floor = (FIRST_CALL_FLOOR_S if first_call else TRIAL_FLOOR_S) * timeout / DEFAULT_TIMEOUT_S
        interpreted = self.report.execution == "triton-interpreter"
        scale = INTERPRETER_TRIAL_SCALE if interpreted else TRIAL_SCALE
        plan = self.plan
        bases: list[tuple[float, str]] = []
        if self.reference_s is not None:
            bases.append((scale * self.reference_s, f"{scale}x the reference's {self.reference_s:.3g} s"))
        if self.candidate_s is not None:
            bases.append(
                (CANDIDATE_CALL_SCALE * self.candidate_s, f"{CANDIDATE_CALL_SCALE}x the candidate's slowest call")
            )
        elif interpreted and plan is not None and (worst := plan.worst_first_call_s()) is not None:
            bases.append((worst, "the reference's work at the interpreter's slowest rate"))
        limit = round(max([floor] + [b for b, _ in bases]), 1)
        terms = [f"{text} ({value:.3g} s)" for value, text in bases]
        terms.append(
            f"{floor:.3g} s ({'a first call, which compiles: ' if first_call else ''}the floor at this timeout)"
        )
        # a call that would outlast the job is stopped as its call, before the timeout: its message keeps the estimate
        left = round(timeout * (1 - JOB_MARGIN) - (_perf_counter() - self.started), 1)
        if 0 < left < limit:
            limit = left
            terms = [f"{left:.3g} s, the time left before the job's timeout (under the largest of {'; '.join(terms)})"]
        if self.candidate_s is not None:
            estimate = f"{self.candidate_s:.3g} s, its slowest call so far at these shapes"
        elif interpreted and plan is not None and plan.call_estimate_s is not None:
            estimate = f"{plan.call_estimate_s:.3g} s, from the reference's work at these shapes"
        elif self.reference_s is not None:
            estimate = f"{self.reference_s:.3g} s, the reference's own time"
        else:
            estimate = "nothing yet: no call has run"
        largest = "" if len(terms) == 1 else "the largest of "
        return limit, (
            f"the limit of one call: {largest}{'; '.join(terms)}; estimated: {estimate}. Every call's limit "
            f"grows with the job's timeout: raise --timeout / timeout_s (now {timeout:g} s)"
        )

    @contextlib.contextmanager
    def phase(self, name: str):
        """Adds the seconds spent in the block to ``report.phases[name]``, less those of the phases inside it (each
        second is counted once)."""
        started = _perf_counter()
        self._inner.append(0.0)
        try:
            yield
        finally:
            spent, inner = _perf_counter() - started, self._inner.pop()
            if self._inner:
                self._inner[-1] += spent
            phases = self.report.phases
            phases[name] = round(phases.get(name, 0.0) + spent - inner, 4)

    def sub_seed(self, offset: int) -> int:
        return self.seed * 2**20 + offset

    def inputs(self, offset: int) -> list:
        """Inputs of this call's seed and ``offset``, in the precision being judged, drawn on the device itself (a
        4096x4096 fp16 torch.randn took 0.6 s on an H100 host's CPU, ten times fp32's, for every trial)."""
        return self.judge.cast(self.problem.make_inputs(self.sub_seed(offset), self.device, on_device=True))

    def compare(self, expected, got, label: int):
        if self.judge.atol is None or self.judge.rtol is None:  # judged per dtype: say which
            first = next(iter(guards._tensors(expected)), None)
            if first is not None:
                self.judge.settle(first.dtype)
        return compare_outputs(expected, got, label, self.judge.atol, self.judge.rtol)

    def finding(self, f: Finding | None) -> None:
        if f is not None and not any(x.code == f.code for x in self.report.findings):
            self.report.findings.append(f)

    def candidate_error(self, what: str, exc: BaseException) -> CandidateFailed:
        assert self.module.__file__ is not None  # import_source ran it from a file
        diags = diagnostics_from_exception(exc, Path(self.module.__file__), self.module.__kforge_source__)
        self.report.errors.append(refusals.explained(f"{what} raised {type(exc).__name__}: {exc}", exc, diags))
        self.report.diagnostics += diags
        return CandidateFailed()

    def run_candidate(self, inputs: list, watch: bool):
        """One guarded forward of ModelNew on its own copy of ``inputs``."""
        used = _clone(inputs)
        guards.poison_free_device_memory(self.device)
        counter = self.target.launch_counter() if watch else None
        try:
            with contextlib.ExitStack() as stack:
                threads = stack.enter_context(guards.ThreadWatch({getattr(self.module, "__file__", None)}))
                ops = stack.enter_context(guards.TorchOpRecorder()) if watch else None
                launches = stack.enter_context(counter) if counter is not None else None
                try:
                    started = _perf_counter()
                    got = self.candidate(*used)
                    sync_device(self.device)
                    self.candidate_s = max(self.candidate_s or 0.0, _perf_counter() - started)
                except (Exception, SystemExit) as e:  # noqa: BLE001  (candidate code can raise anything: diagnostics at its line)
                    raise self.candidate_error("ModelNew.forward", e) from None
        finally:
            self.guard.settle()  # outside the watches: reading the device is not the candidate's doing
        self.finding(threads.finding())
        self.finding(guards.inputs_mutated(inputs, used))
        for f in guards.output_findings(got, used):
            self.finding(f)
        if ops is not None:
            for f in guards.torch_op_findings(ops, launches.count if launches is not None else None):
                self.finding(f)
        return got

    def run_reference(self, inputs: list, model=None):
        try:
            with self.flags.judged():
                started = _perf_counter()
                out = (model or self.reference)(*_clone(inputs))
                sync_device(self.device)
                self.reference_s = max(self.reference_s or 0.0, _perf_counter() - started)
                return out
        except Exception as e:  # noqa: BLE001  (the problem's own code can raise anything: an input error naming it)
            raise InputError(
                f"problem: Model.forward raised {type(e).__name__}: {e}",
                diagnostics_from_exception(e, self.problem.path, self.problem.source),
            ) from None

    def instance(self):
        """The problem at the shapes that run inside the block: the plan's on the interpreter, else its own."""
        return self.plan.applied(self.problem) if self.plan is not None else contextlib.nullcontext()

    def failed(self) -> bool:
        return any(f.severity == "fail" for f in self.report.findings)
