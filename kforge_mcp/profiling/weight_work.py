"""Which of a candidate's kernels work on its weights alone. Such work (splitting, casting, quantizing,
transposing a weight) gives the same result until a weight changes, so it can be done once per weight
version instead of every forward: a lever the kernels' metrics cannot show.

The forward runs twice, on two different input sets, with every kernel launch followed, and the launches
are compared in order. A launch whose arguments (after it ran) hold the same bytes in both forwards computed
nothing from the inputs; when it also reads a parameter, or a buffer such launches made, it works on the
weights alone. Comparing two forwards, rather than a buffer before and after a launch, is immune to the
caching allocator handing a launch the same memory, holding the same values, as last time. Launches the
target cannot follow (a CUDA extension's own) are not judged.
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


def _fingerprint(t) -> tuple[int, int]:
    """Two sums over a tensor's bytes (as int32 words where they fit): equal contents give equal sums, and
    contents computed from different inputs almost never do. Reductions only: no copy of the tensor."""
    import torch

    flat = t.detach().reshape(-1) if t.is_contiguous() else t.detach().contiguous().reshape(-1)
    raw = flat.view(torch.uint8)
    words = raw.view(torch.int32) if raw.numel() % 4 == 0 and raw.data_ptr() % 4 == 0 else raw
    return int(words.sum(dtype=torch.int64)), int(words[::7].sum(dtype=torch.int64))


class Recorder:
    """Each launch's kernel name, argument spans and argument fingerprints after it ran."""

    def __init__(self):
        self.launches: list[tuple[str, list, list]] = []
        self.pending: tuple[str, list] | None = None

    def before(self, name: str, args: tuple) -> None:
        self.pending = (name, [t for t in _tensors(list(args)) if t.numel()])

    def after(self) -> None:
        if self.pending is not None:
            name, tensors = self.pending
            self.launches.append((name, [_span(t) for t in tensors], [_fingerprint(t) for t in tensors]))
            self.pending = None


def weight_work(model, inputs_a, inputs_b, launch_counter) -> dict[str, WeightWork] | None:
    """Per kernel name, its launches in a forward of ``model`` and those that worked on weights alone; None when
    the two forwards launched different kernels. ``launch_counter``: makes the target's context that follows
    each launch (Target.launch_counter)."""
    import torch

    params = [(n, _span(p)) for n, p in [*model.named_parameters(), *model.named_buffers()] if p.numel()]
    runs = []
    for inputs in (inputs_a, inputs_b):
        recorder = Recorder()
        with torch.no_grad(), launch_counter() as counter:
            counter.observer = recorder
            model(*inputs)
        runs.append(recorder.launches)
    if [n for n, _, _ in runs[0]] != [n for n, _, _ in runs[1]]:
        return None
    weighty = [s for _, s in params]
    work: dict[str, WeightWork] = {}
    for (name, spans, prints_a), (_, _, prints_b) in zip(*runs):
        w = work.setdefault(name, WeightWork())
        nbytes = float(sum(b - a for a, b in spans))
        w.launches += 1
        w.bytes += nbytes
        if prints_a == prints_b and _touches(spans, weighty):
            weighty += spans
            w.weight_launches += 1
            w.weight_bytes += nbytes
            w.params |= {n for n, s in params if _touches(spans, [s])}
    return work


def attach_weight_work(report, model, inputs_a, inputs_b, launch_counter) -> None:
    """Mark the report's kernels with the share of their bytes moved by launches on weights alone."""
    try:
        work = weight_work(model, inputs_a, inputs_b, launch_counter)
    except Exception as e:  # noqa: BLE001  (candidate code runs here; the profile stands without this)
        report.notes.append(f"weight work not traced: {type(e).__name__}: {e}")
        return
    if work is None:
        report.notes.append("weight work not judged: two forwards on different inputs launched different kernels")
        return
    report.weight_work = {name: round(w.fraction, 4) for name, w in work.items() if w.weight_launches}
    for k in report.device_kernels():
        w = work.get(k.name)
        if w is not None and w.weight_launches:
            k.weight_work = round(w.fraction, 4)
            k.weights_read = sorted(w.params)
