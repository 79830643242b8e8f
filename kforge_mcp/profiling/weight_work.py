"""Which of a candidate's kernels work on its weights alone. Such work (splitting, casting, quantizing,
transposing a weight) gives the same result until a weight changes, so it can be done once per weight
version instead of every forward: a lever the kernels' metrics cannot show.

One forward runs with its torch calls and its kernel launches recorded in order, and data is followed
from the inputs: a call that touches anything the inputs reached may write every tensor it touches, so
all of them are then input data. A launch that touches no input data but reads a parameter (or a buffer
only weights reached) works on the weights alone. Tensors are compared by the storage they live in, so a
view or a slice counts as its whole buffer: a launch that shares a buffer with input data is never
counted as weight work. Launches the target cannot record (a CUDA extension's own) are not judged.
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
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + max(s.nbytes(), 1)


def _touches(spans: list[tuple[int, int]], marked: list[tuple[int, int]]) -> bool:
    return any(a < d and c < b for a, b in spans for c, d in marked)


def weight_work(model, inputs, launch_counter) -> dict[str, WeightWork]:
    """Per kernel name, its launches in one forward of ``model`` and those that worked on weights alone.
    ``launch_counter``: the target's context that records each launch (Target.launch_counter)."""
    import torch
    from torch.overrides import TorchFunctionMode

    params = [(n, _span(p)) for n, p in [*model.named_parameters(), *model.named_buffers()] if p.numel()]
    tainted = [_span(t) for t in _tensors(list(inputs)) if t.numel()]
    weighty = [s for _, s in params]
    order: list[tuple[str | None, list]] = []  # (kernel name, or None for a torch call; its tensors)
    seen = 0

    def flush(counter) -> None:  # launches recorded since the last torch call go before the next one
        nonlocal seen
        order.extend((name, _tensors(list(args))) for name, args in counter.launches[seen:])
        seen = len(counter.launches)

    with torch.no_grad(), launch_counter as counter:

        class Calls(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                flush(counter)
                out = func(*args, **(kwargs or {}))
                order.append((None, _tensors([args, kwargs or {}, out])))
                return out

        with Calls():
            model(*inputs)
        flush(counter)
    work: dict[str, WeightWork] = {}
    for name, tensors in order:
        spans = [_span(t) for t in tensors if t.numel()]
        if not spans:
            continue
        if _touches(spans, tainted):
            tainted += spans
            kind = "input"
        elif _touches(spans, weighty):
            weighty += spans
            kind = "weight"
        else:
            kind = "other"  # fresh buffers only (a fill): neither
        if name is None:
            continue
        w = work.setdefault(name, WeightWork())
        nbytes = float(sum(t.numel() * t.element_size() for t in tensors))
        w.launches += 1
        w.bytes += nbytes
        if kind == "weight":
            w.weight_launches += 1
            w.weight_bytes += nbytes
            w.params |= {n for n, s in params if _touches(spans, [s])}
    return work


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
