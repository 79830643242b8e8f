"""A reduced instance of a problem: the same model (its channels, features, kernel sizes, strides, groups and
parameters) on a smaller batch and smaller spatial sizes, for work that runs the reference on a CPU within a
memory and time cap (the compute paths' errors, judge/precision_paths.py).

Which sizes may shrink is found by experiment, not by name: each module-level integer of the problem is changed
and the problem built again on the meta device (shapes only: no memory, no compute). A size moves dims of
get_inputs()'s tensors while get_init_inputs() and the model's parameters stay as they were (a channel, feature
or kernel size changes one of them), and the forward still runs. It is *carried* when the outputs grow with it
(each output element is the same computation on other data: a batch, a spatial size the outputs keep) and
*averaged* when they do not (a mean, sum, max or pool downstream takes it away, and shrinking it shortens that
reduction). A problem whose inputs use no such constant gets the same experiment on its inputs' sizes, each
narrowed wherever it occurs.

The caller says what fits (judged on the meta instance). The batch shrinks first, then the carried sizes
together, then the averaged ones, each to the largest value that fits.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pydantic import BaseModel, Field

from kforge_mcp.core.problem import LoadedProblem, seed_everything

SPATIAL_FLOOR = 8  # a carried or averaged size shrinks no lower: a kernel, a stride and a pool still see an interior
# where the samples of a batch mix (a BatchNorm in training mode), the batch shrinks no lower: statistics over fewer
# samples inflate the error (a Gemm + BatchNorm1d at fp32 1e-4: bf16x3 1.47 of the tolerance on 6 samples, 0.44 on
# 16, 0.35 on 64 and 0.34 on 256)
MIXED_BATCH_FLOOR = 64
INPUTS_SIZE = "inputs size "  # the name of a size of the inputs narrowed wherever it occurs (no constant sets it)
SEARCH_STEPS = 10  # halvings of the interval of scale factors searched per group of sizes

Fits = Callable[[object, list], bool]  # (meta model, meta inputs) -> within the caller's budget


# why a reduction is not within its budget: the full problem where no smaller instance builds, else the smallest tried
NOT_BUILT = "no smaller instance builds"
OVER_BUDGET = "still over the budget at the smallest sizes tried"


class ReducedSize(BaseModel):
    name: str = Field(description="a module-level constant, or 'inputs size N' (narrowed wherever it occurs)")
    full: int
    reduced: int
    averaged: bool = Field(False, description="taken away downstream (a mean, sum, max or pool over it)")
    batch: bool = Field(False, description="the batch: the first input's leading size")


class Reduction(BaseModel):
    """How a problem was reduced for a measurement, with the shapes it produced, or why it was not."""

    sizes: list[ReducedSize] = Field(default_factory=list, description="the sizes changed, batch first")
    inputs: list[list[int]] = Field(default_factory=list, description="the full inputs' shapes (tensors only)")
    reduced_inputs: list[list[int]] = Field(default_factory=list)
    outputs: int = Field(0, description="elements of the floating outputs at full size")
    reduced_outputs: int = 0
    kept: list[str] = Field(default_factory=list, description="sizes that may not shrink, each with the reason")
    batch_mixes: bool = Field(
        False, description=f"the samples of a batch mix (a BatchNorm in training mode): kept >= {MIXED_BATCH_FLOOR}"
    )
    reason: str | None = Field(None, description="why the full problem is used, or why the reduction is not smaller")

    @property
    def reduced(self) -> bool:
        return bool(self.sizes)

    @property
    def batch_shrunk(self) -> bool:
        """Fewer samples along the first input's dim 0 than the full problem has."""
        return bool(self.inputs and self.reduced_inputs) and self.reduced_inputs[0][:1] != self.inputs[0][:1]

    def summary(self) -> str:
        if not self.sizes:
            return f"the full problem: {self.reason}"
        changed = ", ".join(f"{s.name} {s.full} -> {s.reduced}" for s in self.sizes)
        shapes = "; ".join(f"{a} -> {b}" for a, b in zip(self.inputs, self.reduced_inputs, strict=False) if a != b)
        text = (
            f"a reduced instance ({changed}; inputs {shapes}; {self.reduced_outputs} of {self.outputs} output elements)"
        )
        averaged = [s.name for s in self.sizes if s.averaged]
        if averaged:
            text += f"; {', '.join(averaged)} shortened a reduction downstream (fewer elements averaged there)"
        if self.batch_mixes:
            text += f"; the samples of a batch mix (a BatchNorm in training mode): at least {MIXED_BATCH_FLOOR} kept"
        return text + (f"; {self.reason}" if self.reason else "")

    @contextlib.contextmanager
    def applied(self, problem: LoadedProblem) -> Iterator[None]:
        """The problem's get_inputs() and Model see the reduced sizes inside the block."""
        with _applied(problem, {s.name: s.reduced for s in self.sizes}, _narrowed(self.sizes)):
            yield


@dataclass(frozen=True)
class _Size:
    name: str
    value: int
    carried: bool
    batch: bool  # it moves dim 0 of the inputs only
    constant: bool  # a module-level constant (else an inputs size)


@dataclass(frozen=True)
class _Instance:
    model: object
    inputs: list
    input_shapes: list[list[int]]
    output_shapes: list[list[int]]
    init: list
    params: list

    @property
    def output_elements(self) -> int:
        return sum(math.prod(s) for s in self.output_shapes)


def _narrowed(sizes) -> dict[int, int]:
    return {s.full: s.reduced for s in sizes if s.name.startswith(INPUTS_SIZE)}


@contextlib.contextmanager
def _applied(problem: LoadedProblem, constants: dict[str, int], narrow: dict[int, int]) -> Iterator[None]:
    namespace = vars(problem.module)  # what get_inputs(), get_init_inputs() and Model read their sizes from
    saved = {k: namespace[k] for k in [*constants, "get_inputs"] if not k.startswith(INPUTS_SIZE)}
    get_inputs = namespace["get_inputs"]
    try:
        namespace.update({k: v for k, v in constants.items() if k in saved})
        if narrow:
            namespace["get_inputs"] = lambda: [_narrow(x, narrow) for x in get_inputs()]
        yield
    finally:
        namespace.update(saved)


def _narrow(x, narrow: dict[int, int]):
    import torch

    if not isinstance(x, torch.Tensor):
        return x
    for d, n in enumerate(x.shape):
        if n in narrow:
            x = x.narrow(d, 0, narrow[n])
    return x.contiguous()


def _tensors(value) -> Iterator:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _signature(values) -> list:
    import torch

    return [(tuple(v.shape), str(v.dtype)) if isinstance(v, torch.Tensor) else repr(v) for v in values]


def _instance(problem: LoadedProblem) -> _Instance:
    """The problem built and run once on the meta device. Raises where it cannot be."""
    import torch

    init = problem.init_inputs("cpu")
    inputs = problem.meta_inputs()
    with torch.device("meta"):
        seed_everything(0)
        model = problem.module.Model(*init)
        with torch.no_grad():
            out = model(*inputs)
    return _Instance(
        model=model,
        inputs=inputs,
        input_shapes=[list(x.shape) for x in _tensors(inputs)],
        output_shapes=[list(t.shape) for t in _tensors(out) if t.is_floating_point()],
        init=_signature(init),
        params=[(k, tuple(v.shape)) for k, v in model.state_dict().items()],
    )


def meta_instance(problem: LoadedProblem) -> tuple[object, list]:
    """The problem's model and inputs on the meta device (shapes only). Raises where it cannot be built there."""
    inst = _instance(problem)
    return inst.model, inst.inputs


def _try(problem: LoadedProblem, constants: dict[str, int], narrow: dict[int, int]) -> _Instance | None:
    try:
        with _applied(problem, constants, narrow):
            return _instance(problem)
    except Exception:  # noqa: BLE001  (the problem's code at sizes it was not written for may raise anything)
        return None


def _classify(full: _Instance, trial: _Instance | None, name: str, value: int, constant: bool) -> _Size | str:
    """The size a trial shows, or why it may not shrink."""
    if trial is None:
        return f"{name}: the problem does not build or run with it smaller"
    if trial.init != full.init:
        return f"{name}: it changes get_init_inputs()"
    if trial.params != full.params:
        return f"{name}: it changes the model's parameters"
    moved = [
        d
        for a, b in zip(full.input_shapes, trial.input_shapes, strict=False)
        for d, (x, y) in enumerate(zip(a, b, strict=False))
        if x != y
    ]
    if not moved and len(full.input_shapes) == len(trial.input_shapes):
        return ""  # not a size of the inputs: nothing to say
    carried = trial.output_shapes != full.output_shapes
    return _Size(name, value, carried, batch=set(moved) == {0}, constant=constant)


def _trial_values(value: int) -> list[int]:
    return sorted({max(1, value // 2), max(1, (3 * value) // 4)} - {value})


def _sizes(problem: LoadedProblem, full: _Instance) -> tuple[list[_Size], list[str]]:
    """The sizes that may shrink, and why the others may not: module constants first, else the inputs' sizes."""
    sizes: list[_Size] = []
    kept: list[str] = []
    constants = [(k, v) for k, v in vars(problem.module).items() if type(v) is int and v >= 2 and not k.startswith("_")]
    for name, value in constants:
        found: _Size | str = ""
        for trial in _trial_values(value):
            found = _classify(full, _try(problem, {name: trial}, {}), name, value, True)
            if isinstance(found, _Size) or found.endswith(("get_init_inputs()", "parameters")):
                break
        if isinstance(found, _Size):
            sizes.append(found)
        elif found:
            kept.append(found)
    if sizes:
        return sizes, kept
    for value in sorted({d for s in full.input_shapes for d in s if d >= 2}, reverse=True):
        name = f"{INPUTS_SIZE}{value}"
        found = ""
        for trial in _trial_values(value):
            found = _classify(full, _try(problem, {}, {value: trial}), name, value, False)
            if isinstance(found, _Size):
                break
        if isinstance(found, _Size):
            sizes.append(found)
        elif found:
            kept.append(found)
    return sizes, kept


def reduce_problem(problem: LoadedProblem, fits: Fits, batch_mixes: bool = False, batch_floor: int = 1) -> Reduction:
    """The largest instance of ``problem`` that ``fits``: the batch shrinks first (to ``batch_floor`` at least, and to
    MIXED_BATCH_FLOOR where ``batch_mixes``: samples_mix), then the carried sizes together, then the averaged ones.
    Without one that fits, the smallest tried, saying so."""
    try:
        full = _instance(problem)
    except Exception as e:  # noqa: BLE001  (data-dependent code, an op without a meta kernel)
        return Reduction(reason=f"the problem does not run on the meta device ({type(e).__name__}: {e})"[:400])
    base = Reduction(inputs=full.input_shapes, outputs=full.output_elements, reduced_inputs=full.input_shapes)
    base.reduced_outputs = base.outputs
    if fits(full.model, full.inputs):
        return base.model_copy(update={"reason": "it fits the budget at full size"})
    sizes, kept = _sizes(problem, full)
    base.kept, base.batch_mixes = kept, batch_mixes
    if not sizes:
        why = "; ".join(kept) or "its inputs have no size above 1"
        return base.model_copy(update={"reason": f"no size of its inputs may shrink ({why})"})
    groups = [
        [s for s in sizes if s.carried and s.batch],
        [s for s in sizes if s.carried and not s.batch],
        [s for s in sizes if not s.carried],
    ]
    values = {s.name: s.value for s in sizes}
    chosen: _Instance | None = None
    for group in [g for g in groups if g]:
        floor = max(batch_floor, MIXED_BATCH_FLOOR if batch_mixes else 1)
        chosen, found = _search(problem, sizes, values, group, fits, floor)
        values.update(found)
        if chosen is not None:
            break
    last = _try(problem, *_split(sizes, values))
    if last is None:  # every value tried failed to build: the full problem, within the caps
        return base.model_copy(update={"reason": NOT_BUILT})
    reduced = [
        ReducedSize(name=s.name, full=s.value, reduced=values[s.name], averaged=not s.carried, batch=s.batch)
        for g in groups
        for s in g
        if values[s.name] != s.value
    ]
    return base.model_copy(
        update={
            "sizes": reduced,
            "reduced_inputs": last.input_shapes,
            "reduced_outputs": last.output_elements,
            "reason": None if chosen is not None else OVER_BUDGET,
        }
    )


def samples_mix(model, inputs) -> bool:
    """Whether the first sample's outputs change when the other samples of the batch do (a BatchNorm in training
    mode mixes them), on real tensors: the model run twice, the second time with samples 1.. of each input along
    the first input's dim 0 changed."""
    import torch

    first = next((x for x in inputs if isinstance(x, torch.Tensor) and x.dim()), None)
    if first is None or first.shape[0] < 2:
        return False
    n = first.shape[0]
    changed = [torch.cat([x[:1], x[1:] * 2 + 1]) if _batched(x, n) and x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        a, b = list(_tensors(model(*inputs))), list(_tensors(model(*changed)))
    return any(
        _batched(x, n) and not torch.allclose(x[:1], y[:1], rtol=1e-3, atol=1e-6, equal_nan=True)
        for x, y in zip(a, b, strict=False)
    )


def _batched(x, n: int) -> bool:
    import torch

    return isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] == n


def _split(sizes: list[_Size], values: dict[str, int]) -> tuple[dict[str, int], dict[int, int]]:
    constants = {s.name: values[s.name] for s in sizes if s.constant and values[s.name] != s.value}
    narrow = {s.value: values[s.name] for s in sizes if not s.constant and values[s.name] != s.value}
    return constants, narrow


def _search(
    problem: LoadedProblem,
    sizes: list[_Size],
    values: dict[str, int],
    group: list[_Size],
    fits: Fits,
    batch_floor: int,
) -> tuple[_Instance | None, dict[str, int]]:
    """The largest common scale of ``group``'s sizes at which the problem builds and fits (the others at
    ``values``): that instance and the group's values, or None and the smallest values that build."""
    floor = {s.name: min(s.value, batch_floor if s.batch else SPATIAL_FLOOR) for s in group}

    def at(scale: float) -> dict[str, int]:
        return {s.name: max(floor[s.name], round(s.value * scale)) for s in group}

    def build(scale: float) -> _Instance | None:
        return _try(problem, *_split(sizes, {**values, **at(scale)}))

    lo, hi = min(floor[s.name] / s.value for s in group), 1.0
    smallest = build(lo)
    if smallest is None:  # the floor does not build (a BatchNorm over one sample): find the least that does
        for _ in range(SEARCH_STEPS):
            mid = (lo * hi) ** 0.5
            if build(mid) is not None:
                hi = mid
            else:
                lo = mid
        lo, hi, smallest = hi, 1.0, build(hi)
    if smallest is None or not fits(smallest.model, smallest.inputs):
        return None, at(lo)
    best, best_scale = smallest, lo
    for _ in range(SEARCH_STEPS):  # hi does not fit (the caller checked): the largest scale between that does
        mid = (lo * hi) ** 0.5
        if at(mid) == at(lo):
            break
        inst = build(mid)
        if inst is not None and fits(inst.model, inst.inputs):
            best, best_scale, lo = inst, mid, mid
        else:
            hi = mid
    return best, at(best_scale)
