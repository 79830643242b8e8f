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

import gc
from collections.abc import Callable
from pathlib import Path

from kforge_mcp.core.errors import CandidateError
from kforge_mcp.core.problem import build_models, load_problem, reference_model
from kforge_mcp.core.requests import BaselinesRequest, VerifyRequest
from kforge_mcp.core.schemas import Finding, VerifyReport
from kforge_mcp.core.source import SourceRuntimeError
from kforge_mcp.judge import guards, precision
from kforge_mcp.judge.baselines import BaselineCache, start_compile, warm
from kforge_mcp.judge.correctness import parameter_differences, weights_finding
from kforge_mcp.judge.device_guard import DeviceGuard
from kforge_mcp.judge.lane_plan import plan_interpreter
from kforge_mcp.judge.timing import _perf_counter, bind_device_clocks
from kforge_mcp.judge.verify.calls import CandidateFailed, OverBudget
from kforge_mcp.judge.verify.timed import INTERPRETER_TIMING_BUDGET_S, TimedCalls
from kforge_mcp.judge.verify.trials import CorrectnessTrials
from kforge_mcp.runtime import refusals


class Verifier(CorrectnessTrials, TimedCalls):
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
            self.problem.check_inputs_fit(self.memory_mb)  # before the candidate is built
        bind_device_clocks(self.device)

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
        self.flags = precision.MathFlags(self.device)
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


def run_verify(
    req: VerifyRequest, progress: Callable[..., None], workdir: Path, cache: BaselineCache, memory_mb: int
) -> VerifyReport:
    started = _perf_counter()  # bound before any candidate could patch time.perf_counter
    try:
        report = Verifier(req, progress, workdir, cache, memory_mb).run()
    finally:
        gc.unfreeze()  # the worker collects after the reply (worker.release_memory)
    report.seconds = _perf_counter() - started
    return report


def run_baselines(
    req: BaselinesRequest, progress: Callable[..., None], workdir: Path, cache: BaselineCache, memory_mb: int
) -> dict:
    """The ``baselines`` job: the problem's reference compiled and its timings kept in this worker,
    ahead of the verify that will reuse them (engine/baselines.py)."""
    import torch

    v = Verifier(req, progress, workdir, cache, memory_mb)
    v.load_problem()
    v.reference = reference_model(v.problem, v.device, seed=v.sub_seed(0), dtype=v.judge.dtype)
    v.draw_timing_inputs()
    with torch.no_grad():
        return warm(v, v.timing_inputs)
