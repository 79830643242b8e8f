"""One verify, inside a worker: build Model and ModelNew with the same weights, check
correctness over fresh inputs with the guards of engine/guards.py, then time the candidate
and the baselines in interleaved rounds.

Each trial runs the candidate first, on its own copy of fresh inputs, while no reference
output of that trial exists yet; then the reference on another copy.

Device-wide state (judge/device_guard.py) is read before the candidate's module is imported and
checked and put back after every stretch of candidate code, so the reference, the baselines and
the next job never run on a device the candidate changed.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import secrets
import statistics
from collections.abc import Callable
from pathlib import Path

from kforge_mcp.core.errors import CandidateError, InputError
from kforge_mcp.core.options import (
    CANDIDATE_CALL_SCALE,
    DEFAULT_TIMEOUT_S,
    FIRST_CALL_FLOOR_S,
    INTERPRETER_TRIAL_SCALE,
    TRIAL_FLOOR_S,
    TRIAL_SCALE,
)
from kforge_mcp.core.problem import build_models, load_problem, reference_model, seed_everything
from kforge_mcp.core.requests import BaselinesRequest, VerifyRequest
from kforge_mcp.core.schemas import Finding, InputSetReport, Timing, VerifyReport
from kforge_mcp.core.settings import Settings
from kforge_mcp.core.source import SourceRuntimeError, diagnostics_from_exception
from kforge_mcp.devices.device import get_device
from kforge_mcp.judge import guards, precision
from kforge_mcp.judge.baselines import (
    BaselineCache,
    baseline_fns,
    resolved,
    start_compile,
    time_with_baselines,
    warm,
)
from kforge_mcp.judge.correctness import compare_outputs, parameter_differences, weights_finding
from kforge_mcp.judge.device_guard import DeviceGuard
from kforge_mcp.judge.lane_plan import BUDGET_SHARE, LanePlan, plan_interpreter, shapes_text
from kforge_mcp.judge.timing import _perf_counter, bind_device_clocks, speedup_interval, sync_device, time_interleaved
from kforge_mcp.runtime import refusals
from kforge_mcp.targets import get_target

# offsets of the sub-seeds drawn from a call's seed (seed * 2**20 + offset)
CORRECTNESS_SEED_BASE = 1000
RECHECK_SEED = 1999
DETERMINISM_SEED = 2999
INPUT_SETS_SEED = 3999
INPUT_SETS_TIMING_SEED = 20_000  # + a set's number * 2**12 + the timed call's number
TIMING_SEED_BASE = 10_000  # + the number of the timed call: every call gets inputs of its own
TIMED_CHECKS = 4  # timed calls of the candidate checked against the reference afterwards
TIMING_SLOTS = 3  # input sets the timed calls rotate through
SOL_MARGIN = 0.9  # the peak table's figures are spec sheets; measured peaks are lower still
INTERPRETER_TIMING_BUDGET_S = 0.25  # per timed callable, under Triton's CPU interpreter
# the interpreter's calls are slow: no warm-up (nothing compiles) and two timed calls suffice to say it is slow
# fewest calls for a candidate whose calls through the interpreter each take longer than its timing budget; a faster
# one keeps the warm-up and the three calls: a cheat that turns wrong after a few calls must meet a timed one
INTERPRETER_TIMING = {"warmup_calls": 0, "min_calls": 2}
HOST_BOUND_MS = 0.02  # below this a GPU call is dominated by Python and the launch path
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


def _detach_copy(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return [_detach_copy(v) for v in value]
    return value


class Verifier:
    def __init__(self, req: BaselinesRequest, progress: Callable[..., None], workdir: Path, cache: BaselineCache):
        self.req, self.progress, self.workdir, self.cache = req, progress, workdir, cache
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

    def inputs(self, offset: int, on_device: bool = False) -> list:
        """Inputs of this call's seed and ``offset``, in the precision being judged."""
        return self.judge.cast(self.problem.make_inputs(self.sub_seed(offset), self.device, on_device))

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

    def trial(self, label: int, inputs: list, watch: bool = False):
        """Returns (reference output on CPU, candidate output) and records any mismatch."""
        self.step(
            f"correctness trial {label + 1}/{self.trials}" if label < self.trials else "correctness re-check",
            label == 0,
        )
        state = guards.buffers(self.reference) if label == 0 else None  # both models are fresh: one forward each
        got = self.run_candidate(inputs, watch)
        expected = self.run_reference(inputs)
        mismatch = self.compare(expected, got, label)
        if state:
            for f in guards.buffer_findings(state, self.reference, self.candidate, lambda e, g: self.compare(e, g, 0)):
                self.finding(f)
        if mismatch is not None:
            self.report.mismatches.append(mismatch)
        return expected, got

    def load_problem(self) -> None:
        """The problem, the precision policy that will judge it, on Triton's CPU interpreter the shapes that run
        (lane_plan.py), and the device's clocks bound."""
        self.problem = load_problem(self.req.problem, self.workdir)
        self.judge = precision.resolve(self.req, self.problem)
        if self.report.execution == "triton-interpreter" and isinstance(self.req, VerifyRequest):
            self.progress("sizing the instance the interpreter runs")
            with self.phase("plan"):
                self.plan = plan_interpreter(self.problem, self.trials, self.req.timeout_s, self.judge.cast)
        with self.instance():
            self.problem.check_inputs_fit(Settings.read().worker_memory_mb)  # before the candidate is built
        bind_device_clocks(self.device)

    def instance(self):
        """The problem at the shapes that run inside the block: the plan's on the interpreter, else its own."""
        return self.plan.applied(self.problem) if self.plan is not None else contextlib.nullcontext()

    def run(self) -> VerifyReport:
        assert isinstance(self.req, VerifyRequest)  # only a baselines job (run_baselines) comes without a candidate
        candidate_source = self.req.candidate
        self.report.findings += self.target.check(candidate_source) + guards.static_findings(candidate_source.text)
        self.load_problem()
        with self.instance():
            return self.judged(candidate_source)

    def judged(self, candidate_source) -> VerifyReport:
        import torch

        self.guard = DeviceGuard(self.device)  # before any of the candidate's code, its import included
        timers = guards.timer_snapshot()
        self.flags = precision.MathFlags(self.judge.precision, self.device)
        self.progress("loading candidate")
        try:
            with self.phase("load"):
                loaded = self.target.load(candidate_source, self.device, self.workdir)
            self.module = loaded.module
            self.report.findings += loaded.findings
            with self.phase("models"):
                self.reference, self.candidate = build_models(
                    self.problem, self.module, self.device, seed=self.sub_seed(0), dtype=self.judge.dtype
                )
                drawn_apart = parameter_differences(self.reference, self.candidate)  # said if the outputs differ
                self.draw_timing_inputs()
        except (SourceRuntimeError, CandidateError) as e:  # the candidate's fault: a verdict, not a tool error
            self.report.errors.append(
                refusals.explained(e.message if isinstance(e, CandidateError) else str(e), e, e.diagnostics)
            )
            self.report.diagnostics += e.diagnostics
            return self.verdict(error=True)
        finally:
            self.guard.settle()  # what the import or the constructor changed
        self.finding(guards.patched_timers(timers))
        if self.report.execution != "triton-interpreter":  # the interpreter's plan may leave timing out
            start_compile(self, self.timing_inputs)  # while the candidate is checked
        # Everything made so far (torch, Triton, the models) is set aside from the collector, so a
        # trial's gc.collect() looks only at what the trials made: ~1 ms instead of ~0.2 s.
        gc.freeze()
        try:
            with torch.no_grad(), self.target.emulate_precision(self.device) as emulated:
                with self.phase("correctness"):
                    self.check_correctness()
                if not self.report.mismatches and not self.failed() and (self.plan is None or self.plan.timing):
                    with self.flags.defaults():  # the baselines as users run them (the candidate too, while timed)
                        self.report.timing = self.time_all()
                    with self.phase("checks"):
                        self.recheck_after_timing()
        except (CandidateFailed, OverBudget):
            self.lane_findings()
            return self.verdict(error=True)
        self.lane_findings()
        if self.report.mismatches:
            self.finding(weights_finding(drawn_apart, self.sub_seed(0)))
        self.finding(guards.patched_timers(timers))
        self.finding(self.flags.finding(self.report.execution))
        for f in getattr(emulated, "findings", lambda: [])():
            self.finding(f)
        if self.report.execution == "triton-interpreter" and self.report.timing:
            self.finding(
                Finding(
                    code="interpreter_timing",
                    evidence={"execution": self.report.execution},
                    message="kernels ran through Triton's CPU interpreter: correctness is real, "
                    f"the speedup says nothing about a GPU (timed briefly: {INTERPRETER_TIMING_BUDGET_S} s a callable)",
                )
            )
        return self.verdict()

    def draw_timing_inputs(self) -> None:
        """The first timed call's inputs, drawn on the device; their shapes key the kept baseline timings."""
        self.timing_inputs = self.inputs(TIMING_SEED_BASE, on_device=True)
        self.timing_shapes = describe_inputs(self.timing_inputs)

    def time_reference(self) -> None:
        """One forward of a copy of the reference (the trials' models stay untouched), so that even the
        first trial's limit follows from the reference's own time; then the same at torch's defaults, where they
        differ from the math that judges (check_default_math)."""
        try:
            model = copy.deepcopy(self.reference)
        except Exception:  # noqa: BLE001  (a model that cannot be copied: the first trial gets the floor)
            return
        inputs = self.inputs(REFERENCE_TIME_SEED)
        truth = self.run_reference(inputs, model)
        self.check_default_math(model, inputs, truth)
        del model, truth

    def check_default_math(self, model, inputs: list, truth) -> None:
        """The reference at torch's defaults against the reference that judges: where the defaults (cuDNN's TF32
        convolutions on a GPU) move it past the tolerance, a harness that runs them fails exact kernels; say so."""
        from kforge_mcp.judge.precision_paths import error_fraction

        if not self.flags.defaults_differ:
            return
        self.progress("the reference at torch's default math")
        with self.flags.defaults():
            at_defaults = model(*_clone(inputs))
            sync_device(self.device)
        first = next(iter(guards._tensors(truth)), None)
        if first is not None and (self.judge.atol is None or self.judge.rtol is None):
            self.judge.settle(first.dtype)
        fraction = error_fraction(truth, at_defaults, self.judge.atol, self.judge.rtol)
        if fraction is not None and fraction <= 1.0:
            return
        diff = compare_outputs(truth, at_defaults, 0, self.judge.atol, self.judge.rtol)
        defaults, judged = self.flags.describe(self.flags.before), self.flags.describe(self.flags.judging)
        self.finding(
            Finding(
                code="reference_moved_by_default_math",
                evidence={
                    "error_fraction_of_tolerance": fraction,
                    "max_abs_error": diff.max_abs_error if diff else None,
                    "mismatched_fraction": diff.mismatched_fraction if diff else None,
                    "default_math": defaults,
                    "judged_math": judged,
                },
                message=f"at torch's default math ({defaults}) the reference itself sits "
                + (f"{fraction:.3g}x the tolerance" if fraction is not None else "non-finite")
                + f" from the reference at {judged}"
                + (f" (max abs error {diff.max_abs_error:.3g})" if diff and diff.max_abs_error is not None else "")
                + ": a harness that runs it at the defaults fails exact kernels; this verdict is judged at "
                + judged,
            )
        )

    def check_correctness(self) -> None:
        self.time_reference()
        outputs = []
        t = 0
        while t < self.trials:
            inputs = self.inputs(CORRECTNESS_SEED_BASE + t)
            if t == 0:
                self.report.shapes = describe_inputs(inputs)
            expected, got = self.trial(t, inputs, watch=t == 0)
            if t == 0:
                self.finding(self.within_atol(expected))
            if t < 2:
                outputs.append(_detach_copy(expected))  # two are enough to see a degenerate problem
            del expected
            if self.report.mismatches:
                return
            if t == 0 and self.plan is not None:
                self.settle_plan()
            if t == self.trials - 1 and (self.plan is None or self.plan.determinism):
                self.check_determinism(inputs, got)
            del got
            gc.collect()  # nothing of an earlier trial is left to find
            t += 1
        if len(outputs) >= 2:
            for f in guards.degenerate_findings(outputs[0], outputs[1]):
                self.finding(f)
        sets = self.problem.input_sets(self.device, self.sub_seed(INPUT_SETS_SEED))
        self.report.input_sets = [InputSetReport(index=i + 1, shapes=describe_inputs(s)) for i, s in enumerate(sets)]
        for i, inputs in enumerate(sets):
            self.step(f"input set {i + 1}", first_call=True)
            inputs = self.judge.cast(inputs)
            got = self.run_candidate(inputs, watch=False)
            mismatch = self.compare(self.run_reference(inputs), got, self.trials + i)
            self.report.input_sets[i].correct = mismatch is None
            if mismatch is not None:
                mismatch.reason = f"input set {i + 1}: {mismatch.reason}"
                self.report.mismatches.append(mismatch)
                return

    def within_atol(self, expected) -> Finding | None:
        """Outputs that all sit within atol of zero pass any output near zero: the check cannot tell a right kernel
        from a wrong one (KernelBench's 23_Conv3d_GroupNorm_Mean returns the mean of a GroupNorm's output: 0 plus
        rounding, whatever the convolution computed)."""

        tensors = [t for t in guards._tensors(expected) if t.is_floating_point() and t.numel()]
        if not tensors or self.judge.atol is None:
            return None
        largest = max(float(t.detach().abs().max()) for t in tensors)
        if not largest <= self.judge.atol:
            return None
        return Finding(
            code="outputs_within_atol",
            severity="warning",
            evidence={"largest_abs_output": largest, "atol": self.judge.atol, "dtype": str(tensors[0].dtype)},
            message=f"every output of the reference is within atol ({self.judge.atol:g}) of zero (the largest "
            f"|output| is {largest:.3g}): a kernel that returns zeros passes, so this check cannot tell a right "
            "kernel from a wrong one; judge it with a smaller atol (the problem's ATOL, or atol=...) or with "
            "parameters that make the outputs larger",
        )

    def settle_plan(self) -> None:
        """The calls left on the interpreter, from the candidate's first call (lane_plan.py)."""
        assert self.plan is not None
        why = self.plan.after_first_call(self.candidate_s or 0.0, _perf_counter() - self.started)
        if why is not None:
            self.report.errors.append(why)
            raise OverBudget()
        self.trials = self.report.trials = self.plan.run_trials
        if self.plan.timing:
            start_compile(self, self.timing_inputs)  # while the other trials run

    def lane_findings(self) -> None:
        """On the interpreter: the shapes that ran where they are not the problem's own, and the calls the budget
        left out."""
        plan = self.plan
        if plan is None:
            return
        shapes = ", ".join(self.report.shapes)
        if plan.reduced:
            assert plan.reduction is not None
            sizes = ", ".join(f"{s.name} {s.full} -> {s.reduced}" for s in plan.reduction.sizes)
            self.report.published_shapes = shapes_text(plan.reduction.inputs)
            self.finding(
                Finding(
                    code="reduced_instance",
                    evidence={
                        "sizes": [s.model_dump() for s in plan.reduction.sizes],
                        "shapes": self.report.shapes,
                        "published_shapes": self.report.published_shapes,
                        "budget_s": round(plan.budget_s, 1),
                        "call_estimate_s": plan.call_estimate_s,
                    },
                    message=f"Triton's CPU interpreter ran a reduced instance of the problem ({sizes}): inputs "
                    f"{shapes}; a GPU verify runs the published shapes ({', '.join(self.report.published_shapes)}). "
                    "Channels, features and kernel sizes are the problem's. Sized for its calls to fit "
                    f"{plan.budget_s:.0f} s ({BUDGET_SHARE:.0%} of timeout_s)",
                )
            )
        if plan.notes and plan.first_call_s is not None:
            self.finding(
                Finding(
                    code="interpreter_budget",
                    evidence={
                        "first_call_s": round(plan.first_call_s, 3),
                        "trials_asked": plan.trials,
                        "trials_run": plan.run_trials,
                        "timed": plan.timing,
                        "budget_s": round(plan.budget_s, 1),
                    },
                    message=f"the candidate took {plan.first_call_s:.3g} s a call through the interpreter at {shapes}: "
                    f"{'; '.join(plan.notes)}, to fit {plan.budget_s:.0f} s of calls ({BUDGET_SHARE:.0%} of "
                    "timeout_s). Raise --timeout / timeout_s for more, or verify on a GPU, which runs every trial at "
                    "the published shapes and times it",
                )
            )

    def check_determinism(self, inputs: list, first) -> None:
        seed_everything(self.sub_seed(DETERMINISM_SEED))  # the same inputs, but not the same random stream
        self.step("determinism check")
        again = self.run_candidate(inputs, watch=False)
        diff = self.compare(first, again, self.trials - 1)
        if diff is not None:
            self.finding(
                Finding(
                    code="nondeterministic",
                    severity="fail",
                    evidence=diff.model_dump(exclude_none=True),
                    message="two runs of ModelNew on the same inputs differ beyond tolerance",
                )
            )

    def recheck_after_timing(self) -> None:
        """A candidate that is right only until it is timed (a replayed result) fails here."""
        before = len(self.report.mismatches)
        self.trial(self.trials, self.inputs(RECHECK_SEED))
        if len(self.report.mismatches) > before:
            self.finding(
                Finding(
                    code="wrong_after_timing",
                    severity="fail",
                    message="ModelNew was correct before timing and wrong after it",
                )
            )

    def time_all(self) -> Timing:
        budget = self.req.timing_budget_s
        if self.report.execution == "triton-interpreter":  # its speedup says nothing about a GPU: measured briefly
            budget = min(budget, INTERPRETER_TIMING_BUDGET_S)
        inputs = self.timing_inputs
        fns = {"candidate": self.candidate, **baseline_fns(self, inputs)}
        self.progress(f"timing {', '.join(fns)} in interleaved rounds")
        try:
            with self.phase("timing"):
                stats, samples, kept = time_with_baselines(
                    self, fns, budget, ("candidate", TIMED_CHECKS, self.seed), **self.timing_calls()
                )
        except (Exception, SystemExit) as e:  # noqa: BLE001  (candidate code can raise anything: diagnostics at its line)
            raise self.candidate_error("ModelNew.forward (timing)", e) from None
        with self.phase("checks"):
            self.check_timed_calls(kept)
            self.after_timing(stats, samples, inputs)
        if self.req.timing_sets == "all" and self.report.input_sets and not self.report.mismatches:
            self.time_input_sets(resolved(fns), budget)
        return Timing(**stats)

    def timing_calls(self) -> dict:
        """How many calls time_interleaved makes at least: fewer where the interpreter's calls are slow."""
        slow = self.candidate_s is not None and self.candidate_s > INTERPRETER_TIMING_BUDGET_S
        return INTERPRETER_TIMING if self.report.execution == "triton-interpreter" and slow else {}

    def time_input_sets(self, fns: dict, budget: float) -> None:
        """Each get_input_sets() shape timed as the main one is (interleaved rounds, fresh inputs every call,
        some timed calls checked after), its speedup, and the geomean over every shape timed."""
        for s in self.report.input_sets:
            self.progress(f"timing input set {s.index} of {len(self.report.input_sets)}")
            seed = INPUT_SETS_TIMING_SEED + s.index * 2**12

            def draw(n: int, i: int = s.index - 1, seed: int = seed) -> list:
                return self.judge.cast(self.problem.input_sets(self.device, self.sub_seed(seed + n))[i])

            try:
                with self.phase("timing"):
                    stats, samples, kept = time_interleaved(
                        fns,
                        self.device,
                        budget,
                        feed=self.timing_feed(draw),
                        check=("candidate", 1, self.seed),
                        **self.timing_calls(),
                    )
            except (Exception, SystemExit) as e:  # noqa: BLE001  (candidate code can raise anything: diagnostics at its line)
                raise self.candidate_error(f"ModelNew.forward (timing input set {s.index})", e) from None
            with self.phase("checks"):
                before = len(self.report.mismatches)
                self.check_timed_calls(kept)
                if len(self.report.mismatches) > before:
                    self.report.mismatches[-1].reason = f"input set {s.index}, {self.report.mismatches[-1].reason}"
                    return
            s.timing = Timing(**stats)
            medians = {k: v.median_ms for k, v in stats.items() if k != "candidate"}
            if medians and stats["candidate"].median_ms > 0:
                s.speedup_over = min(medians, key=lambda name: medians[name])
                s.speedup = medians[s.speedup_over] / stats["candidate"].median_ms
        speedups = [self.report.speedup] + [s.speedup for s in self.report.input_sets]
        known = [x for x in speedups if x is not None and x > 0]
        if len(known) == len(speedups):
            self.report.speedup_geomean = statistics.geometric_mean(known)

    def after_timing(self, stats: dict, samples: dict, inputs: list) -> None:
        """The speedup and its interval, then (GPU) the stream, device-state and speed-of-light checks."""
        medians = {k: v.median_ms for k, v in stats.items() if k != "candidate"}
        if medians and stats["candidate"].median_ms > 0:
            best = min(medians, key=lambda k: medians[k])
            self.report.speedup = medians[best] / stats["candidate"].median_ms
            self.report.speedup_over = best
            self.report.speedup_ci = list(speedup_interval(samples[best], samples["candidate"]))
        if self.device != "cpu":
            try:
                self.finding(guards.stream_findings(lambda: self.candidate(*inputs), self.device))
            finally:
                self.guard.settle()
            self.report.device_state = device_state(self.device)
            self.speed_of_light(stats["candidate"].median_ms)
            if stats["candidate"].median_ms < HOST_BOUND_MS:
                self.finding(
                    Finding(
                        code="host_bound_timing",
                        evidence={"candidate_median_ms": stats["candidate"].median_ms},
                        message=f"the candidate takes under {HOST_BOUND_MS * 1e3:.0f} us a call: its time is "
                        "mostly the host's launch path, and the speedup can move by tens of percent "
                        "between runs; use larger shapes to compare kernels",
                    )
                )

    def timing_feed(self, draw: Callable[[int], list] | None = None):
        """Inputs for the timed calls: a few slots at fresh addresses, each refilled with fresh values
        (drawn on the device, before the clock starts) for every call. A result remembered under a
        fingerprint of its input is never asked for again, and one remembered by address alone is
        stale: the checks of timed calls find it. ``fresh_timing_inputs: false`` (for before/after
        measurements only) feeds one set over and over, as timing did before."""
        draw = draw or (lambda n: self.inputs(TIMING_SEED_BASE + n, on_device=True))  # n: the call's number
        slots = [draw(i) for i in range(TIMING_SLOTS)]
        if not self.req.fresh_timing_inputs:
            return lambda: slots[0]
        count = iter(range(TIMING_SLOTS, 2**20 - TIMING_SEED_BASE))

        def feed() -> list:
            n = next(count)
            fresh, slot = draw(n), slots[n % TIMING_SLOTS]
            for i, (old, new) in enumerate(zip(slot, fresh)):
                if hasattr(old, "copy_") and getattr(old, "shape", None) == getattr(new, "shape", None):
                    old.copy_(new)
                else:
                    slot[i] = new
            return slot

        return feed

    def check_timed_calls(self, kept: list) -> None:
        """Outputs of timed calls chosen at random (by the call's seed) against the reference, run
        after the timing on copies of the inputs those calls got."""
        for inputs, got in kept:
            mismatch = self.compare(self.run_reference(inputs), got, self.trials)
            if mismatch is not None:
                mismatch.reason = f"a timed call: {mismatch.reason}"
                self.report.mismatches.append(mismatch)
                self.finding(
                    Finding(
                        code="wrong_during_timing",
                        severity="fail",
                        evidence={"checked_calls": len(kept), "max_abs_error": mismatch.max_abs_error},
                        message="ModelNew was correct on the correctness trials and wrong on a timed call "
                        "(each timed call gets fresh inputs; a result remembered from an earlier input is wrong)",
                    )
                )
                return

    def speed_of_light(self, candidate_ms: float) -> None:
        """Faster than physics is a bug: the floor is the minimum bytes at peak bandwidth and the
        FLOPs at the device's fastest (lowest-precision) tensor rate, for the reference's work or for the least
        work a lever of its structure leaves (a kernel that folds a sum into its GEMM is honest)."""
        from kforge_mcp.judge.roofline import lookup_peaks, reference_roofline, set_verify_bound, with_measured
        from kforge_mcp.judge.structure import reference_levers

        name = self.report.device_state.get("name")
        # the reference's bound and levers do not change between verifies of its problem: a worker computes them once
        key = (
            self.problem.source.digest,
            self.device,
            name,
            tuple(self.timing_shapes),
            self.judge.atol,
            self.judge.rtol,
        )
        kept = self.cache.rooflines
        try:
            if key not in kept:
                kept[key] = reference_roofline(
                    self.problem, self.device, name, None, atol=self.judge.atol, rtol=self.judge.rtol
                )
            roof = with_measured(kept[key].model_copy(deep=True), candidate_ms)
            if roof.below_bound:  # the levers say how much less work than the reference a kernel may do
                if key + ("levers",) not in kept:
                    kept[key + ("levers",)] = reference_levers(
                        self.problem, self.device, kept[key].model_copy(deep=True)
                    )
                roof = with_measured(kept[key + ("levers",)].model_copy(deep=True), candidate_ms)
        except Exception as e:  # noqa: BLE001  (a reference the counter cannot run gets no bound, and says so)
            self.finding(Finding(code="no_speed_of_light", message=f"no speed-of-light bound: {type(e).__name__}: {e}"))
            return
        set_verify_bound(self.report, roof, candidate_ms)
        peaks, _ = lookup_peaks(self.report.device_state.get("name"))
        work = [(roof.flops, roof.bytes)] + [(lv.flops_after, lv.bytes_after) for lv in roof.levers]
        floor_ms = min(max(b / peaks.bandwidth, f / max(peaks.flops.values())) for f, b in work) * 1e3
        if candidate_ms < floor_ms * SOL_MARGIN:
            self.finding(
                Finding(
                    code="faster_than_light",
                    severity="suspicious",
                    evidence={
                        "candidate_ms": candidate_ms,
                        "floor_ms": floor_ms,
                        "bytes": roof.bytes,
                        "flops": roof.flops,
                        "device": peaks.name,
                    },
                    message=f"{candidate_ms:.4f} ms is faster than the device allows for this problem "
                    f"({floor_ms:.4f} ms to move its minimum bytes and do its FLOPs)",
                )
            )

    def failed(self) -> bool:
        return any(f.severity == "fail" for f in self.report.findings)

    def verdict(self, error: bool = False) -> VerifyReport:
        r = self.report
        r.precision, r.atol, r.rtol = self.judge.precision, self.judge.atol, self.judge.rtol
        if hasattr(self, "flags"):
            r.reference_math = self.flags.describe(self.flags.judging)
            r.baseline_math = self.flags.describe(self.flags.before)
            self.flags.restore()  # the next job in this worker starts with torch's switches as they were
        if hasattr(self, "guard"):
            self.guard.settle()
            self.finding(self.guard.finding())
        if error:
            r.verdict, r.correct = "error", False
        elif r.mismatches or self.failed():
            r.verdict, r.correct = "fail", False
        else:
            r.correct = True
            r.verdict = "suspicious" if any(f.severity == "suspicious" for f in r.findings) else "pass"
        return r


def describe_inputs(inputs: list) -> list[str]:
    """'8x128 float32' for a tensor, the type's name for anything else."""
    return [
        f"{'x'.join(map(str, x.shape)) or 'scalar'} {str(x.dtype).removeprefix('torch.')}"
        if hasattr(x, "shape") and hasattr(x, "dtype")
        else type(x).__name__
        for x in inputs
    ]


def device_state(device: str) -> dict:
    """What is known of the device's clocks while we timed (NVML through torch when present)."""
    return get_device(device).state()


def run_verify(req: VerifyRequest, progress: Callable[..., None], workdir: Path, cache: BaselineCache) -> VerifyReport:
    started = _perf_counter()  # bound before any candidate could patch time.perf_counter
    try:
        report = Verifier(req, progress, workdir, cache).run()
    finally:
        gc.unfreeze()  # the worker collects after the reply (worker.release_memory)
    report.seconds = _perf_counter() - started
    return report


def run_baselines(req: BaselinesRequest, progress: Callable[..., None], workdir: Path, cache: BaselineCache) -> dict:
    """The ``baselines`` job: the problem's reference compiled and its timings kept in this worker,
    ahead of the verify that will reuse them (engine/baselines.py)."""
    import torch

    v = Verifier(req, progress, workdir, cache)
    v.load_problem()
    v.reference = reference_model(v.problem, v.device, seed=v.sub_seed(0), dtype=v.judge.dtype)
    v.draw_timing_inputs()
    with torch.no_grad():
        return warm(v, v.timing_inputs)
