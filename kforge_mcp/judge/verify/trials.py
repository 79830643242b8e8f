"""The correctness trials: the candidate and the reference on the same fresh inputs, trial after trial, the input
sets, the determinism check and the re-check after timing."""

from __future__ import annotations

import copy
import gc

from kforge_mcp.core.problem import seed_everything
from kforge_mcp.core.schemas import Finding, InputSetReport
from kforge_mcp.judge import guards
from kforge_mcp.judge.baselines import start_compile
from kforge_mcp.judge.timing import _perf_counter
from kforge_mcp.judge.verify.calls import (
    CORRECTNESS_SEED_BASE,
    DETERMINISM_SEED,
    INPUT_SETS_SEED,
    RECHECK_SEED,
    REFERENCE_TIME_SEED,
    OverBudget,
    describe_inputs,
)
from kforge_mcp.judge.verify.findings import VerifierFindings


def _detach_copy(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return [_detach_copy(v) for v in value]
    return value


class CorrectnessTrials(VerifierFindings):
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

    def check_determinism(self, inputs: list, first) -> None:
        seed_everything(self.sub_seed(DETERMINISM_SEED))  # the same inputs, but not the same random stream
        self.step("determinism check")
        again = self.run_candidate(inputs, watch=False)
        diff = self.compare(first, again, self.trials - 1)
        if diff is not None:
            # which run was wrong: the second against the reference (a result remembered by an input's address
            # returns another input's output when a copy of the same inputs lands where that one lived)
            wrong = self.compare(self.run_reference(inputs), again, self.trials - 1)
            if wrong is not None:
                wrong.reason = f"the determinism check's second run: {wrong.reason}"
                self.report.mismatches.append(wrong)
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
