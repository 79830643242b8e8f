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

from kforge_mcp.judge.correctness import flatten_outputs


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


def _tensors(args) -> list:
    """The tensors among a launch's arguments, a tensor descriptor standing for its base."""
    import torch

    found = []
    for v in flatten_outputs(list(args)):
        v = v if isinstance(v, torch.Tensor) else getattr(v, "base", None)  # triton's TensorDescriptor
        if isinstance(v, torch.Tensor) and v.numel():
            found.append(v)
    return found


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
    contents computed from different inputs almost never do. Reductions only: a contiguous tensor is not copied."""
    import torch

    flat = t.detach().reshape(-1) if t.is_contiguous() else t.detach().contiguous().reshape(-1)
    raw = flat.view(torch.uint8)
    words = raw.view(torch.int32) if raw.numel() % 4 == 0 and raw.data_ptr() % 4 == 0 else raw
    return int(words.sum(dtype=torch.int64)), int(words[::7].sum(dtype=torch.int64))


class Recorder:
    """Each launch's kernel name, argument spans and argument fingerprints after it ran."""

    def __init__(self):
        self.launches: list[tuple[str, list, list]] = []

    def launched(self, name: str, args: tuple) -> None:
        tensors = _tensors(args)
        self.launches.append((name, [_span(t) for t in tensors], [_fingerprint(t) for t in tensors]))


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
    """Put on the report, per kernel launched on weights alone, the share of its bytes those launches moved and
    the parameters they read."""
    try:
        work = weight_work(model, inputs_a, inputs_b, launch_counter)
    except Exception as e:  # noqa: BLE001  (candidate code runs here; the profile stands without this)
        report.notes.append(f"weight work not traced: {type(e).__name__}: {e}")
        return
    if work is None:
        report.notes.append("weight work not judged: two forwards on different inputs launched different kernels")
        return
    weighed = {name: w for name, w in work.items() if w.weight_launches}
    report.weight_work = {name: round(w.fraction, 4) for name, w in weighed.items()}
    report.weights_read = {name: sorted(w.params) for name, w in weighed.items()}
