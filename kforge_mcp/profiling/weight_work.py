"""Which of a candidate's kernels work on its weights alone. Such work (splitting, casting, quantizing,
transposing a weight) gives the same result until a weight changes, so it can be done once per weight
version instead of every forward: a lever the kernels' metrics cannot show.

One forward runs with its torch calls and its kernel launches followed as they happen, and data is followed
from the inputs. A launch whose arguments overlap input data works on the inputs, and the bytes it changed
(compared before and after it) are input data from then on; a launch that touches no input data but reads a
parameter, or bytes only weights reached, works on the weights alone, and the bytes it changed are weight
data. A torch call passes its arguments' kind on to what it returns. Arguments are compared by the bytes they
span, so an argument that shares bytes with input data is never counted as weight work. Launches the target
cannot follow (a CUDA extension's own) are not judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class WeightWork:
    """A kernel's launches in one forward, and how many of them (by bytes touched) worked on weights alone."""

    launches: int = 0
    weight_launches: int = 0
    bytes: float = 0.0
    weight_bytes: float = 0.0
    params: set[str] = field(default_factory=set)

    @property
    def fraction(self) -> float:
        return self.weight_bytes / self.bytes if self.bytes else 0.0


def _tensors(value) -> list:
    """The tensors in a launch argument or a torch call's argument: tensors, tensor descriptors (their
    base), and lists or tuples of them."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    base = getattr(value, "base", None)  # triton's TensorDescriptor
    if isinstance(base, torch.Tensor):
        return [base]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _span(t) -> tuple[int, int]:
    """The bytes a tensor argument can reach: its own extent when contiguous, else the rest of its storage."""
    start = t.data_ptr()
    if t.is_contiguous():
        return start, start + max(t.numel() * t.element_size(), 1)
    s = t.untyped_storage()
    return start, s.data_ptr() + max(s.nbytes(), 1)


def _touches(spans: list[tuple[int, int]], marked: list[tuple[int, int]]) -> bool:
    return any(a < d and c < b for a, b in spans for c, d in marked)


def _changed(before, after) -> tuple[int, int] | None:
    """The byte range a launch changed in a contiguous tensor (first to last differing element), or None."""
    import torch

    diff = (before.reshape(-1).view(torch.uint8) != after.reshape(-1).view(torch.uint8)).nonzero()
    if not diff.numel():
        return None
    start = after.data_ptr()
    return start + int(diff[0]), start + int(diff[-1]) + 1


# torch functions that make memory without reading their arguments' values
ALLOCATORS = {"empty_like", "zeros_like", "ones_like", "full_like", "new_empty", "new_zeros", "new_ones", "new_full"}


class Follower:
    """Keeps the byte ranges the inputs reached (tainted) and those only weights reached (weighty)."""

    def __init__(self, params: list[tuple[str, tuple[int, int]]], inputs: list):
        self.params = params
        self.tainted = [_span(t) for t in inputs if t.numel()]
        self.weighty = [s for _, s in params]
        self.work: dict[str, WeightWork] = {}
        self.pending: tuple[str, list, list] | None = None

    def kind(self, spans: list[tuple[int, int]]) -> str:
        if _touches(spans, self.tainted):
            return "input"
        return "weight" if _touches(spans, self.weighty) else "other"

    def before(self, name: str, args: tuple) -> None:
        tensors = [t for t in _tensors(list(args)) if t.numel()]
        self.pending = (name, tensors, [t.clone() if t.is_contiguous() else None for t in tensors])

    def after(self) -> None:
        if self.pending is None:
            return
        name, tensors, copies = self.pending
        self.pending = None
        spans = [_span(t) for t in tensors]
        kind = self.kind(spans)
        wrote = [_changed(c, t) if c is not None else _span(t) for t, c in zip(tensors, copies)]
        self.mark(kind, [w for w in wrote if w is not None])
        w = self.work.setdefault(name, WeightWork())
        nbytes = float(sum(t.numel() * t.element_size() for t in tensors))
        w.launches += 1
        w.bytes += nbytes
        if kind == "weight":
            w.weight_launches += 1
            w.weight_bytes += nbytes
            w.params |= {n for n, s in self.params if _touches(spans, [s])}

    def call(self, name: str, args: list, out) -> None:
        """A torch call: the new memory it returns is of its arguments' kind. A view's bytes are already known,
        and an allocation (empty_like and kin) copies no values."""
        if name.strip("_") in ALLOCATORS:
            return
        spans = [_span(t) for t in _tensors(args) if t.numel()]
        made = [s for s in (_span(t) for t in _tensors([out]) if t.numel()) if not _touches([s], spans)]
        if spans and made:
            self.mark(self.kind(spans), made)

    def mark(self, kind: str, spans: list[tuple[int, int]]) -> None:
        if kind == "input":
            self.tainted += spans
        elif kind == "weight":
            self.weighty += spans


def weight_work(model, inputs, launch_counter) -> dict[str, WeightWork]:
    """Per kernel name, its launches in one forward of ``model`` and those that worked on weights alone.
    ``launch_counter``: the target's context that follows each launch (Target.launch_counter)."""
    import torch
    from torch.overrides import TorchFunctionMode

    params = [(n, _span(p)) for n, p in [*model.named_parameters(), *model.named_buffers()] if p.numel()]
    follower = Follower(params, _tensors(list(inputs)))

    class Calls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            follower.call(getattr(func, "__name__", ""), [args, kwargs or {}], out)
            return out

    with torch.no_grad(), launch_counter as counter:
        counter.observer = follower
        with Calls():
            model(*inputs)
    return follower.work


def attach_weight_work(report, model, inputs, launch_counter) -> None:
    """Mark the report's kernels with the share of their bytes moved by launches on weights alone."""
    try:
        work = weight_work(model, inputs, launch_counter)
    except Exception as e:  # noqa: BLE001  (candidate code runs here; the profile stands without this)
        report.notes.append(f"weight work not traced: {type(e).__name__}: {e}")
        return
    report.weight_work = {name: round(w.fraction, 4) for name, w in work.items() if w.weight_launches}
    for k in report.device_kernels():
        w = work.get(k.name)
        if w is not None and w.weight_launches:
            k.weight_work = round(w.fraction, 4)
            k.weights_read = sorted(w.params)
