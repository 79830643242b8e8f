"""The paths measured on the problem's reference in a worker, within the time budget: each path's max error,
scaled to the full problem."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from pydantic import BaseModel, Field

from kforge_mcp.core.reduced import Reduction
from kforge_mcp.core.requests import RooflineRequest
from kforge_mcp.core.schemas import Convolution, Lever
from kforge_mcp.judge.precision_paths.cost import MEMORY_BYTES, PLAN_S, _plan_of, plan
from kforge_mcp.judge.precision_paths.emulation import PATH_SPECS, Splits, _mode_class, paths_for
from kforge_mcp.judge.precision_paths.errors import _floating, error_fractions, sample_factor, varying_share

# A path passes when its max error is at most this fraction of the tolerance: verify draws fresh inputs for
# every trial and the GPU sums in another order, so a path at 0.9 of the tolerance here can fail there.
MARGIN = 0.5


SEEDS = (1, 2)  # input sets measured; the weights are drawn under seed 0


BUDGET_S = 30.0  # measuring stops here (the paths left are reported unmeasured): a call answers within a minute


# A measurement's worker stays under PEAK_BYTES. Its parameters cannot be reduced (they are the problem's), and each
# format's parts of them are kept while later paths use them, beside an fp64 copy: the Level 2 GEMMs peaked at 6-8x
# their parameters' fp32 bytes plus about 0.3 GiB (2.3 GiB for an 8192 x 8192 weight, 6.4 GiB for 16384 x 16384).
PEAK_BYTES = 4 * 2**30
PARAMETER_COPIES = 9
BASE_BYTES = 3 * 2**28


class MeasuredPaths(BaseModel):
    """What one problem's reference gives at one tolerance: its counts for the roofline and each path's error."""

    flops: float
    bytes: float
    out_bytes: float | None = Field(None, description="bytes of the outputs alone (the write no kernel avoids)")
    dtype: str = "fp32"
    precision: str | None = Field(None, description="the precision that judges it (as verify resolves it)")
    atol: float | None = None
    rtol: float | None = None
    errors: dict[str, float | None] = Field(
        default_factory=dict,
        description="path -> max |emulated - reference| / (atol + rtol |reference|) over the outputs and input "
        "sets; None: not finite (the path overflows or gives NaN)",
    )
    products: int = Field(0, description="matrix products and convolutions the reference does per forward")
    flops_by_op: dict[str, float] = Field(default_factory=dict, description="FLOPs by op: matmul, convolution, ...")
    special_functions: float = Field(0.0, description="special-function evaluations of one forward (exp, log, ...)")
    logs_by_op: dict[str, float] = Field(
        default_factory=dict, description="elements of one forward through each op that takes a log of each"
    )
    convs: list[Convolution] = Field(default_factory=list, description="the convolutions' geometry and FLOPs")
    levers: list[Lever] = Field(
        default_factory=list, description="levers of the reference's structure, read in the same worker"
    )
    not_emulated: list[str] = Field(default_factory=list, description="ops with FLOPs the emulation leaves alone")
    seeds: list[int] = Field(default_factory=list)
    margin: float = MARGIN
    unmeasured: dict[str, str] = Field(
        default_factory=dict, description="path -> why it was not measured (the time budget); judged by rounding"
    )
    reduction: Reduction | None = Field(None, description="the instance measured: reduced sizes and shapes, or why not")
    scaled_by: dict[str, float] = Field(
        default_factory=dict,
        description="path -> what its max error on the reduced instance was multiplied by to predict the full "
        "problem's (more elements give a larger max: sample_factor times the share of the error that varies)",
    )
    budget_s: float = BUDGET_S
    peak_rss_bytes: int | None = Field(
        None, description="the worker's peak resident memory while measuring (sampled every 20 ms)"
    )
    seconds: float = Field(0.0, description="the measurement's time in the worker")
    phases: dict[str, float] = Field(
        default_factory=dict,
        description="where the worker's seconds went: count (the reference's FLOPs and bytes, before the measurement's "
        "seconds), plan (the reduced instance, on the meta device), model (the reference drawn), reference (its "
        "outputs on each input set), then each path measured",
    )
    cached: bool = Field(False, description="read from the cache under the home, not measured by this call")
    notes: list[str] = Field(default_factory=list)


def code_digest() -> str:
    """The paths', the roofline's and the levers' code: a change to any makes earlier measurements stale."""
    judge = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for package in ("precision_paths", "structure", "roofline"):
        for path in sorted((judge / package).glob("*.py")):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _split_format(path: str) -> str:
    """The format a path's operands are rounded or split to (fp32's FMA: fp64, exact products)."""
    base = PATH_SPECS[path].base
    return "fp64" if base == "fp32" else base


@dataclass
class _PathRun:
    fractions: list  # each input set's error fractions
    finite: bool = True
    forwards: int = 0
    products: int = 0
    skipped: set[str] = field(default_factory=set)


def _run_path(model, cases: list, mode, judge, last_start: float) -> _PathRun:
    """The reference on each input set with its products on ``mode``'s path, none started after ``last_start``."""
    import torch

    from kforge_mcp.core.problem import seed_everything

    run = _PathRun(fractions=[])
    for seed, inputs, expected in cases:
        if time.perf_counter() > last_start:
            break
        mode.count = 0
        seed_everything(seed)
        with mode:
            got = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
        run.forwards, run.products, run.skipped = run.forwards + 1, max(run.products, mode.count), mode.skipped
        if not mode.count:
            break
        f = error_fractions(expected, got, judge.atol, judge.rtol)
        if f is None:
            run.finite = False
            break
        run.fractions.append(f)
    return run


class Laps(dict[str, float]):
    """Seconds from one mark to the next, by the name of what ended at each (from ``started``)."""

    def __init__(self, started: float) -> None:
        super().__init__()
        self.last = started

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self[name], self.last = round(now - self.last, 3), now


def measure_reference(
    problem, req: RooflineRequest, counts, seeds: tuple[int, ...] = SEEDS, budget_s: float = BUDGET_S
) -> MeasuredPaths:
    """In a worker: with the problem's ``counts`` (roofline.count_problem), the error of every path open to
    its dtype, at the tolerance verify would judge it at for ``req`` (precision, atol, rtol), measured on a reduced
    instance of the problem (its full size when that fits) and stopped at ``budget_s``."""
    import torch

    from kforge_mcp.judge import precision

    started = time.perf_counter()
    judge = precision.resolve(req, problem)
    dtype = counts.dtype
    # fastest first: what a budget leaves unmeasured is what the bound needs least
    order = [p for p in reversed(paths_for(dtype)) if p in PATH_SPECS and not (p == dtype and p != "fp32")]

    phase = Laps(started)
    too_large = _parameters_over_budget(problem, judge)
    if too_large:
        why = f"{too_large}: judged by rounding"
        return _measured(counts, judge, started, unmeasured=dict.fromkeys(order, too_large), notes=[why], phases=phase)
    reduction, model = _reduced_reference(problem, judge, order, seeds, phase)
    growth = sample_factor(reduction.outputs * len(seeds), reduction.reduced_outputs * len(seeds))
    deadline = started + budget_s
    mode_cls = _mode_class()
    errors: dict[str, float | None] = {}
    scaled_by: dict[str, float] = {}
    unmeasured: dict[str, str] = {}
    products, emulated, skipped = 0, 0, set[str]()
    with reduction.applied(problem), torch.no_grad():
        cases, reference_s = _reference_cases(problem, model, judge, seeds)
        phase("reference")
        cost = _plan_of(problem)
        splits = Splits([*model.parameters(), *model.buffers()])
        within = _within_atol(cases, judge)
        if within:  # every output within atol of zero: any path, zeros too, "passes"; errors cannot rank paths
            unmeasured = {name: within for name in order}
            order = []
        for i, name in enumerate(order):
            spec = PATH_SPECS[name]
            expect_s = reference_s * (cost.forward_s(name) / cost.forward_s() if cost else len(spec.terms))
            run = _run_path(model, cases, mode_cls(spec, splits), judge, deadline - expect_s)
            phase(name)
            if _split_format(name) not in {_split_format(p) for p in order[i + 1 :]}:
                splits.drop(_split_format(name))  # no later path rounds to it
            products, skipped = max(products, run.products), skipped | run.skipped
            emulated += run.forwards
            if run.forwards and not products:  # nothing to emulate: every path gives the reference itself
                break
            if run.finite and not run.fractions:
                unmeasured[name] = f"not measured within the {budget_s:g} s budget"
                continue
            share = varying_share(run.fractions[0], run.fractions[1]) if len(run.fractions) > 1 else 1.0
            scaled_by[name] = 1 + share * (growth - 1)
            worst = max(float(f.abs().max()) if f.numel() else 0.0 for f in run.fractions) if run.finite else None
            errors[name] = None if worst is None else worst * scaled_by[name]
    if emulated and not products:
        errors, scaled_by, unmeasured = {}, {}, {}
    notes = _notes_on_measure(reduction, growth if scaled_by else 1.0, within, list(unmeasured), budget_s)
    notes += _notes_on_work(emulated, products, skipped)
    return _measured(
        counts,
        judge,
        started,
        errors=errors,
        unmeasured=unmeasured,
        reduction=reduction,
        scaled_by=scaled_by,
        budget_s=budget_s,
        products=products,
        not_emulated=sorted(skipped),
        seeds=list(seeds),
        phases=phase,
        notes=notes,
    )


def _measured(counts, judge, started: float, **fields) -> MeasuredPaths:
    """What a measurement found (``fields``) beside the problem's counts and the tolerance that judged it."""
    return MeasuredPaths(
        flops=counts.flops,
        bytes=counts.bytes,
        out_bytes=counts.out_bytes,
        dtype=counts.dtype,
        precision=judge.precision,
        atol=judge.atol,
        rtol=judge.rtol,
        flops_by_op=counts.flops_by_op,
        special_functions=counts.special_functions,
        logs_by_op=counts.logs_by_op,
        convs=list(counts.convs),
        seconds=round(time.perf_counter() - started, 3),
        **fields,
    )


def _parameters_over_budget(problem, judge) -> str | None:
    """Why the paths cannot be measured within PEAK_BYTES: the reference's parameters and buffers are too large
    (counted on the meta device; the judge's tolerance then settled on its output there, as the measurement would
    have settled it). None where they fit, or where the problem does not build on the meta device (the
    measurement's own caps then hold it)."""
    import torch

    from kforge_mcp.core.reduced import meta_instance
    from kforge_mcp.judge.correctness import flatten_outputs

    try:
        built, inputs = meta_instance(problem)
    except Exception:  # noqa: BLE001  (data-dependent code, an op without a meta kernel)
        return None
    model = cast("torch.nn.Module", built)  # the problem's Model
    elements = sum(t.numel() for t in [*model.parameters(), *model.buffers()] if t.is_floating_point())
    need = BASE_BYTES + PARAMETER_COPIES * 4 * elements
    if need <= PEAK_BYTES:
        return None
    # its output settles the tolerance: one more meta forward, on a refusal only
    if judge.atol is None or judge.rtol is None:
        with torch.device("meta"), torch.no_grad():
            first = next((t for t in flatten_outputs(model(*inputs)) if isinstance(t, torch.Tensor)), None)
        if first is not None:
            judge.settle(first.dtype)
    return (
        f"not measured: the reference's parameters hold {elements * 4 / 2**30:.3g} GiB in fp32, and splitting them "
        f"for every path would take about {need / 2**30:.3g} GiB, over the measurement's {PEAK_BYTES / 2**30:g} GiB"
    )


def _reduced_reference(problem, judge, order: list[str], seeds: tuple[int, ...], phase: Callable[[str], None]):
    """(reduction, the reference model on the CPU): the instance planned to measure ``order`` on ``seeds`` within
    PLAN_S and MEMORY_BYTES, with more samples where the reference mixes statistics over its batch."""
    from kforge_mcp.core.problem import reference_model
    from kforge_mcp.core.reduced import reduce_problem, samples_mix

    def fits(model, inputs) -> bool:
        cost = plan(model, inputs)
        return cost.seconds(order, len(seeds)) <= PLAN_S and cost.intermediates <= MEMORY_BYTES

    reduction = reduce_problem(problem, fits)
    phase("plan")
    with reduction.applied(problem):
        model = reference_model(problem, "cpu", 0, judge.dtype)
        mixes = reduction.batch_shrunk and samples_mix(model, judge.cast(problem.make_inputs(seeds[0], "cpu")))
    if mixes:  # statistics over the batch: measured on more samples
        reduction = reduce_problem(problem, fits, batch_mixes=True)
        with reduction.applied(problem):
            model = reference_model(problem, "cpu", 0, judge.dtype)
    phase("model")
    return reduction, model


def _reference_cases(problem, model, judge, seeds: tuple[int, ...]) -> tuple[list, float]:
    """Each input set as (seed, inputs, the reference's outputs), and the slowest reference forward; settles the
    judge's tolerance on the outputs' dtype where none was given."""
    import torch

    from kforge_mcp.core.problem import seed_everything
    from kforge_mcp.judge.correctness import flatten_outputs

    cases, reference_s = [], 0.0
    for seed in seeds:
        inputs = judge.cast(problem.make_inputs(seed, "cpu"))
        seed_everything(seed)
        t0 = time.perf_counter()
        expected = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
        reference_s = max(reference_s, time.perf_counter() - t0)
        cases.append((seed, inputs, expected))
        if judge.atol is None or judge.rtol is None:
            first = next((t for t in flatten_outputs(expected) if isinstance(t, torch.Tensor)), None)
            if first is not None:
                judge.settle(first.dtype)
    return cases, reference_s


def _within_atol(cases: list, judge) -> str | None:
    """Why no measured error can rank the paths, when every output of the reference sits within atol of zero."""
    from kforge_mcp.judge.correctness import flatten_outputs

    largest = max(
        (float(t.abs().max()) for *_, e in cases for t in flatten_outputs(e) if _floating(t) and t.numel()),
        default=None,
    )
    if largest is None or judge.atol is None or largest > judge.atol:
        return None
    return f"the reference's outputs all sit within atol ({judge.atol:g}) of zero (largest {largest:.3g})"


def _notes_on_measure(
    reduction, growth: float, within: str | None, unmeasured: list[str], budget_s: float
) -> list[str]:
    """The instance measured, how its errors were scaled (``growth`` 1: not scaled) and what was not measured."""
    notes = [f"paths measured on {reduction.summary()}"]
    if growth > 1:
        notes.append(
            f"each path's max error scaled for {reduction.outputs} output elements rather than "
            f"{reduction.reduced_outputs}: up to {growth:.3g}x where its error varies with the inputs, less where "
            f"it does not (scaled_by)"
        )
    if within:
        notes.append(f"{within}: a measured error cannot tell one path from another, so each is judged by rounding")
    elif unmeasured:
        notes.append(f"{', '.join(unmeasured)} not measured within the {budget_s:g} s budget: judged by rounding")
    return notes


def _notes_on_work(emulated: int, products: int, skipped: set[str]) -> list[str]:
    """What the emulation left as it was: everything, or the ops it does not emulate."""
    notes = []
    if emulated and not products:
        notes.append("the reference does no matrix product or convolution: every path computes it alike")
    if skipped:
        notes.append(f"not emulated (computed in the problem's dtype): {', '.join(sorted(skipped))}")
    return notes
