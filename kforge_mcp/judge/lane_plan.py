"""The CPU lane's plan. Triton's interpreter runs a kernel's programs one after another in Python: on Level 2
problems it took 50 to 6,000 times as long as torch's CPU ops take for the same work, and a GEMM with 8192 x 8192
weights 20 to 160 s a call even on one row. A verify there runs the problem at its published shapes where its
calls fit the budget (a share of the job's timeout), else on a reduced instance (core/reduced.py: batch and
spatial sizes scaled down; channels, features and kernel sizes, which the weights and the numerics depend on, kept),
sized by the work of the reference at CPU rates times INTERPRETER_SLOWDOWN.

After the first call of the candidate its own time is known, and the calls left follow it: every trial, the
determinism check and the timing where they fit what is left of the budget; else the timing goes first (its
speedup says nothing about a GPU), then the determinism check (the interpreter runs a kernel's programs one after
another, so the races it looks for cannot show), then trials down to MIN_TRIALS (two inputs tell a replayed result
from a computed one). Where even those cannot end before the timeout, the verify stops with an error saying how
long they would take and what timeout_s would let them finish, instead of being killed at the timeout.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

from kforge_mcp.core.problem import LoadedProblem
from kforge_mcp.core.reduced import Reduction, reduce_problem

BUDGET_SHARE = 0.4  # of the job's timeout: the candidate's calls are planned to take this long (120 s of 300 s)
# the interpreter's time over the reference's work at CPU rates (judge/precision_paths.py's plan): what the plan
# sizes an instance by, and the pessimistic end a first call's limit allows for (seen: 50x to 6,000x)
INTERPRETER_SLOWDOWN = 500.0
INTERPRETER_SLOWDOWN_WORST = 10_000.0
BATCH_FLOOR = 2  # a reduced batch keeps two samples: a kernel that reads only the first one still fails
MIN_TRIALS = 2
TIMED_CALLS = 4  # candidate calls timing costs on the interpreter: one to size it, two timed, the re-check after
SAFETY = 1.2  # calls may take this much longer than the slowest one so far before the timeout is at risk


@dataclass
class LanePlan:
    """What a verify on the interpreter runs: the instance, and the calls that fit its budget."""

    budget_s: float
    timeout_s: float
    trials: int  # asked for
    reduction: Reduction | None = None  # None: the published shapes (the plan could not size the problem)
    call_estimate_s: float | None = None  # one call of the candidate, from the reference's work
    run_trials: int = 0  # trials to run, settled after the first call
    determinism: bool = True
    timing: bool = True
    first_call_s: float | None = None
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.run_trials = self.trials

    @property
    def reduced(self) -> bool:
        return self.reduction is not None and self.reduction.reduced

    def applied(self, problem: LoadedProblem):
        """The problem's get_inputs() and Model see the planned sizes inside the block."""
        return self.reduction.applied(problem) if self.reduced else contextlib.nullcontext()  # type: ignore[union-attr]

    def worst_first_call_s(self) -> float | None:
        """How long a first call may take at the planned shapes, at the slow end of what the interpreter does."""
        if self.call_estimate_s is None:
            return None
        return self.call_estimate_s * INTERPRETER_SLOWDOWN_WORST / INTERPRETER_SLOWDOWN

    def after_first_call(self, seconds: float, elapsed_s: float) -> str | None:
        """Settle the calls left from the first one's time (``elapsed_s``: the job so far). Returns why the verify
        cannot finish before its timeout, or None."""
        self.first_call_s = seconds
        per_call = max(seconds, 1e-3)
        more = math.floor((self.budget_s - seconds) / per_call)  # further calls that fit the budget
        left = self.trials - 1  # trials after the first
        if left + 1 + TIMED_CALLS <= more:
            return None
        self.timing = False
        if left + 1 <= more:
            self.notes.append("not timed")
        else:
            self.determinism = False
            self.run_trials = min(self.trials, max(MIN_TRIALS, more + 1))
            asked = f"{self.run_trials} of the {self.trials} trials asked" if self.run_trials < self.trials else ""
            self.notes.append(
                ", ".join(
                    filter(
                        None,
                        [
                            asked,
                            "no determinism check (the interpreter runs a kernel's programs one "
                            "after another: a race cannot show there)",
                            "not timed",
                        ],
                    )
                )
            )
        calls = self.run_trials - 1 + self.determinism
        ends = elapsed_s + calls * per_call * SAFETY
        if ends <= self.timeout_s:
            return None
        need = math.ceil(ends / 0.9 / 10) * 10
        return (
            f"the candidate took {seconds:.3g} s a call through Triton's CPU interpreter at these shapes: the "
            f"{self.run_trials} trials a verdict needs would end after about {ends:.0f} s, past the timeout of "
            f"{self.timeout_s:g} s. Raise --timeout / timeout_s to {need:g} or more, or verify on a GPU"
        )


def plan_interpreter(problem: LoadedProblem, trials: int, timeout_s: float, cast) -> LanePlan:
    """The instance a verify on Triton's CPU interpreter runs: the published shapes where every planned call fits
    BUDGET_SHARE of ``timeout_s`` at the estimated rate, else the largest reduced instance that does (``cast``: the
    judged precision's cast of the inputs)."""
    from kforge_mcp.judge.precision_paths import plan

    budget = BUDGET_SHARE * timeout_s
    lane = LanePlan(budget_s=budget, timeout_s=timeout_s, trials=trials)
    calls = trials + 1 + TIMED_CALLS

    def estimate(model, inputs) -> float:
        return plan(model, cast(inputs)).forward_s() * INTERPRETER_SLOWDOWN

    def fits(model, inputs) -> bool:
        return estimate(model, inputs) * calls <= budget

    try:
        lane.reduction = reduce_problem(problem, fits, batch_floor=BATCH_FLOOR)
    except Exception:  # noqa: BLE001  (a problem the meta device cannot build: its own shapes, within the limits)
        return lane
    with contextlib.suppress(Exception), lane.applied(problem):
        from kforge_mcp.core.reduced import meta_instance

        lane.call_estimate_s = estimate(*meta_instance(problem))
    return lane


def shapes_text(shapes: list[list[int]]) -> list[str]:
    return ["x".join(map(str, s)) or "scalar" for s in shapes]
