"""One verify, inside a worker: build Model and ModelNew with the same weights, check
correctness over fresh inputs, then time the candidate and the baselines the same way."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from ..errors import InputError
from ..problem import Source, build_models, load_problem
from ..schemas import Finding, Timing, VerifyReport
from ..targets import get_target
from .correctness import compare_outputs
from .loader import SourceRuntimeError, diagnostics_from_exception
from .timing import time_callable

CORRECTNESS_SEED_BASE = 1000
TIMING_SEED = 7


class BaselineCache:
    """torch.compile'd references kept warm in the worker, keyed by problem and device,
    so a repeated verify does not pay the compile again."""

    def __init__(self):
        self.compiled: dict[tuple[str, str], object] = {}


def _clone(inputs: list) -> list:
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def _sync(device: str) -> None:
    import torch

    api = getattr(torch, device.split(":")[0], None)
    if device != "cpu" and api is not None and hasattr(api, "synchronize"):
        api.synchronize()


def _candidate_error(report: VerifyReport, what: str, exc: BaseException, module) -> VerifyReport:
    diags = diagnostics_from_exception(exc, Path(module.__file__), module.__kforge_source__)
    report.verdict, report.correct = "error", False
    report.errors.append(f"{what} raised {type(exc).__name__}: {exc}")
    report.diagnostics += diags
    return report


def run_verify(req: dict, progress: Callable[[str], None], workdir: Path, cache: BaselineCache) -> VerifyReport:
    import torch

    started = time.perf_counter()
    target = get_target(req["target"])
    device = req["device"]
    trials = int(req.get("trials", 5))
    atol, rtol = req.get("atol"), req.get("rtol")
    report = VerifyReport(target=target.name, device=device, execution=target.execution(device), trials=trials)
    candidate_source = Source.from_wire(req["candidate"])
    report.findings += target.check(candidate_source)

    problem = load_problem(Source.from_wire(req["problem"]), workdir)
    progress("loading candidate")
    try:
        module = target.load(candidate_source, device, workdir)
        reference, candidate = build_models(problem, module, device)
    except SourceRuntimeError as e:
        report.verdict, report.correct = "error", False
        report.errors.append(str(e))
        report.diagnostics += e.diagnostics
        return _finish(report, started)

    with torch.no_grad():
        for trial in range(trials):
            progress(f"correctness trial {trial + 1}/{trials}")
            inputs = problem.make_inputs(CORRECTNESS_SEED_BASE + trial, device)
            try:
                expected = reference(*_clone(inputs))
            except Exception as e:
                raise InputError(f"problem: Model.forward raised {type(e).__name__}: {e}",
                                 diagnostics_from_exception(e, problem.path, problem.source)) from None  # fmt: skip
            try:
                got = candidate(*_clone(inputs))
                _sync(device)
            except (Exception, SystemExit) as e:
                return _finish(_candidate_error(report, "ModelNew.forward", e, module), started)
            mismatch = compare_outputs(expected, got, trial, atol, rtol)
            if mismatch is not None:
                report.mismatches.append(mismatch)
                report.verdict, report.correct = "fail", False
                return _finish(report, started)
        report.correct = True

        report.timing = _time_all(req, problem, reference, candidate, module, device, cache, progress, report)
        if report.verdict == "error":
            return _finish(report, started)
    report.verdict = "pass"
    if report.execution == "triton-interpreter":
        report.findings.append(Finding(
            code="interpreter_timing",
            message="kernels ran through Triton's CPU interpreter: correctness is real, the speedup says nothing about a GPU",
            evidence={"execution": report.execution},
        ))  # fmt: skip
    return _finish(report, started)


def _time_all(req, problem, reference, candidate, module, device, cache, progress, report) -> Timing:
    import torch

    budget = float(req.get("timing_budget_s", 1.0))
    baselines = req.get("baselines", ["eager", "compiled"])
    inputs = problem.make_inputs(TIMING_SEED, device)
    timing = Timing()
    progress("timing candidate")
    try:
        timing.candidate = time_callable(lambda: candidate(*inputs), device, budget)
    except (Exception, SystemExit) as e:
        _candidate_error(report, "ModelNew.forward (timing)", e, module)
        return timing
    if "eager" in baselines:
        progress("timing eager baseline")
        timing.eager = time_callable(lambda: reference(*inputs), device, budget)
    if "compiled" in baselines:
        progress("timing torch.compile baseline")
        key = (problem.source.digest, device)
        try:
            compiled = cache.compiled.get(key)
            if compiled is None:
                compiled = torch.compile(reference)
            timing.compiled = time_callable(lambda: compiled(*inputs), device, budget, warmup_calls=2)
            cache.compiled[key] = compiled
        except Exception as e:
            report.findings.append(Finding(code="compiled_baseline_unavailable",
                                           message=f"torch.compile baseline could not run here: {type(e).__name__}: {str(e)[:300]}",
                                           evidence={"device": device}))  # fmt: skip
    medians = {name: t.median_ms for name, t in (("eager", timing.eager), ("compiled", timing.compiled)) if t}
    if medians and timing.candidate and timing.candidate.median_ms > 0:
        best = min(medians, key=medians.get)
        report.speedup = medians[best] / timing.candidate.median_ms
        report.speedup_over = best
    return timing


def _finish(report: VerifyReport, started: float) -> VerifyReport:
    report.seconds = time.perf_counter() - started
    return report
