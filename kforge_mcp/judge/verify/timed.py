"""Timing the candidate with its baselines in interleaved rounds (judge/baselines.py, judge/timing.py), on fresh
inputs every call, the timed calls checked afterwards, and the speedup with the checks that follow it."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from kforge_mcp.core.schemas import Finding, Timing
from kforge_mcp.judge import guards
from kforge_mcp.judge.baselines import baseline_fns, resolved, time_with_baselines
from kforge_mcp.judge.timing import speedup_interval, time_interleaved
from kforge_mcp.judge.verify.calls import INPUT_SETS_TIMING_SEED, TIMING_SEED_BASE, describe_inputs
from kforge_mcp.judge.verify.findings import VerifierFindings, device_state

TIMED_CHECKS = 4  # timed calls of the candidate checked against the reference afterwards
TIMING_SLOTS = 3  # input sets the timed calls rotate through
INTERPRETER_TIMING_BUDGET_S = 0.25  # per timed callable, under Triton's CPU interpreter
# the interpreter's calls are slow: no warm-up (nothing compiles) and two timed calls suffice to say it is slow
# fewest calls for a candidate whose calls through the interpreter each take longer than its timing budget; a faster
# one keeps the warm-up and the three calls: a cheat that turns wrong after a few calls must meet a timed one
INTERPRETER_TIMING = {"warmup_calls": 0, "min_calls": 2}
HOST_BOUND_MS = 0.02  # below this a GPU call is dominated by Python and the launch path


class TimedCalls(VerifierFindings):
    def draw_timing_inputs(self) -> None:
        """The first timed call's inputs, drawn on the device; their shapes key the kept baseline timings."""
        self.timing_inputs = self.inputs(TIMING_SEED_BASE)
        self.timing_shapes = describe_inputs(self.timing_inputs)

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
        draw = draw or (lambda n: self.inputs(TIMING_SEED_BASE + n))  # n: the call's number
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
