"""The findings a verify adds beyond a mismatch: outputs too small to judge, a reference torch's default math
moves, the interpreter's reduced instance and budget, and a time faster than the device allows."""

from __future__ import annotations

from kforge_mcp.core.schemas import Finding
from kforge_mcp.devices.device import get_device
from kforge_mcp.judge import guards
from kforge_mcp.judge.correctness import compare_outputs
from kforge_mcp.judge.lane_plan import BUDGET_SHARE, shapes_text
from kforge_mcp.judge.timing import sync_device
from kforge_mcp.judge.verify.calls import VerifierState, _clone

SOL_MARGIN = 0.9  # the peak table's figures are spec sheets; measured peaks are lower still


class VerifierFindings(VerifierState):
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


def device_state(device: str) -> dict:
    """What is known of the device's clocks while we timed (NVML through torch when present)."""
    return get_device(device).state()
