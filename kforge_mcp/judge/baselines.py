"""The baselines of a verify (eager PyTorch and torch.compile).

The compiled reference is kept in the worker per (problem, shapes, device, dtype), so a repeated verify does not
pay torch.compile again. The baselines' timings are kept on disk (KFORGE_BASELINES_DIR, under the home), keyed by
the problem, the shapes timed, the device's name, the dtype, the baselines and the torch and Triton versions (and
kforge's own code), so they outlive the worker and the server; a change of any of them is another key. The next
verify times the candidate interleaved with the first baseline (the anchor, eager when asked for), so that
baseline's figure and the speedup over it are measured now, as the first time. The other baselines (torch.compile,
whose timing costs the most: its guards run on every call) are their kept timings scaled by how far the anchor
moved since: the same clocks, host and neighbours move both alike. A ``baselines_reused`` finding says so, with the
factor and the age. An anchor that moved more than RESCALE_LIMIT means the device changed more than a factor can
stand for, and every callable is timed again, interleaved. A baseline whose timing is kept is not compiled at all
unless that happens.

Where nothing is kept, torch.compile starts on a thread of its own as soon as the reference is built
(start_compile), on a copy with its own buffers, while the candidate is checked for correctness: it is mostly
host work (tracing, code generation, compiler processes), and the trials are not timed. Nothing is timed while a
compile runs (``settled``), in this verify or the next job of the worker.

The ``baselines`` worker job makes both ahead of a verify, while a CPU worker builds the candidate (pipeline.py).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from kforge_mcp.core.errors import KforgeError
from kforge_mcp.core.schemas import Finding, Roofline, TimingStats
from kforge_mcp.judge.timing import _perf_counter, precise, summarize, time_interleaved
from kforge_mcp.runtime.cache import CompileCache

# ``v`` below is the verify's Verifier (judge/verify/), which imports this module.

STORE_SETTING = "KFORGE_BASELINES_DIR"  # where a worker keeps the timings (runtime/environment.py sets it)
ANCHOR_SHARE = 0.5  # the anchor's timing budget, as a share of the candidate's (its figure is reported)
# beyond this the kept timings are not scaled but timed again. A host-bound eager baseline of tens of
# microseconds moves by up to about 10% between verifies a few seconds apart, so a tighter limit re-times
# on noise; a clock or neighbour change shows up as a larger step.
RESCALE_LIMIT = 0.25


@dataclass
class Kept:
    stats: dict[str, TimingStats]  # name -> its statistics
    samples: dict[str, list[float]]  # name -> samples (ms)
    at: float = field(default_factory=time.time)

    def to_json(self) -> dict:
        return {"stats": {n: s.model_dump() for n, s in self.stats.items()}, "samples": self.samples, "at": self.at}

    @classmethod
    def from_json(cls, value: dict) -> Kept:
        stats = {n: TimingStats.model_validate(s) for n, s in value["stats"].items()}
        return cls(stats, value["samples"], value["at"])


class BaselineCache:
    """What a worker keeps between verifies: compiled references (and those compiling), the reference's bound, and
    the baselines' timings, on disk where ``root`` (or KFORGE_BASELINES_DIR) names a folder."""

    def __init__(self, root: Path | None = None):
        self.compiled: dict[tuple, object] = {}
        self.compiling: dict[tuple, Future] = {}  # started ahead, on a thread of its own
        self.ahead_s: dict[tuple, float] = {}  # how long a compile started ahead took, till its verify reads it
        self.failed: dict[tuple, Exception] = {}  # a compile started ahead that raised, till its verify says so
        self.rooflines: dict[tuple, Roofline] = {}  # the reference's bound (and levers) per problem, shapes and device
        root = root or (Path(os.environ[STORE_SETTING]) if os.environ.get(STORE_SETTING) else None)
        self.store = CompileCache(root, "the baselines' timings") if root is not None else None
        self.memory: dict[str, Kept] = {}

    def key(self, **parts) -> str:
        return CompileCache(Path()).key(kind="baselines", triton=_triton_version(), **parts)

    def get(self, key: str) -> Kept | None:
        if key not in self.memory and self.store is not None and (value := self.store.get(key)) is not None:
            with contextlib.suppress(KeyError, TypeError, ValueError):  # an entry of another layout: timed again
                self.memory[key] = Kept.from_json(value)
        return self.memory.get(key)

    def put(self, key: str, kept: Kept) -> None:
        self.memory[key] = kept
        if self.store is not None:
            with contextlib.suppress(KforgeError):  # a read-only home keeps them for this worker only
                self.store.put(key, kept.to_json())

    def settled(self) -> None:
        """Wait for every compile on a thread of its own (nothing is timed or profiled while one runs) and keep
        what it made."""
        for key, future in list(self.compiling.items()):
            try:
                self.compiled[key], self.ahead_s[key] = future.result()
            except Exception as e:  # noqa: BLE001  (its verify reports it)
                self.failed[key] = e
            self.compiling.pop(key, None)


def _triton_version() -> str:
    try:
        import triton

        return str(triton.__version__)
    except ImportError:
        return "-"


def problem_key(v) -> tuple:
    return (v.problem.source.digest, v.device, str(v.judge.dtype), tuple(v.timing_shapes))


def timing_key(v, names: list[str]) -> str:
    return v.cache.key(
        problem=v.problem.source.digest,
        shapes=v.timing_shapes,
        device=v.device_name,
        dtype=str(v.judge.dtype),
        baselines=names,
        fresh_inputs=v.req.fresh_timing_inputs,
    )


def wanted_names(v) -> list[str]:
    return [n for n in ("eager", "compiled") if n in v.req.baselines]


def start_compile(v, inputs: list) -> None:
    """torch.compile of the reference on a thread of its own, run once on ``inputs`` (drawn by the caller), where
    it is asked for, not compiled in this worker yet and no kept timing makes it unneeded."""
    import torch

    key = problem_key(v)
    if "compiled" not in v.req.baselines or key in v.cache.compiled or key in v.cache.compiling:
        return
    if v.cache.get(timing_key(v, wanted_names(v))) is not None:
        return
    reference = with_own_buffers(v.reference)
    if reference is None:  # compiled after the trials instead (compiled_baseline)
        return
    future: Future = Future()

    def compile_now() -> None:
        started = _perf_counter()
        try:
            with torch.no_grad():
                compiled = torch.compile(reference)
                compiled(*inputs)  # compile now, so a failure is the baseline's, not the timing's
        except Exception as e:  # noqa: BLE001  (reported where the baseline is needed)
            future.set_exception(e)
            return
        future.set_result((compiled, _perf_counter() - started))

    v.cache.compiling[key] = future
    threading.Thread(target=compile_now, name="kforge-baseline-compile", daemon=True).start()


def with_own_buffers(model):
    """``model`` with its parameters shared and its buffers its own (None where it cannot be copied). The compile
    ahead runs its forward beside the trials, and a training-mode BatchNorm's forward updates its running
    statistics: run on the judged reference itself, a compile that finished during the first trial advanced them
    twice there, and that trial compares them with the candidate's (``buffers_differ`` on an honest kernel)."""
    import copy

    try:
        return copy.deepcopy(model, {id(p): p for p in model.parameters()})
    except Exception:  # noqa: BLE001  (a module that cannot be copied)
        return None


def compiled_baseline(v, inputs: list) -> Callable | None:
    """The torch.compile'd reference: kept, or the compile started ahead waited for, or compiled now; None with a
    finding where torch.compile fails here."""
    import torch

    key = problem_key(v)
    with v.phase("baseline_compile"):
        v.cache.settled()  # a compile started ahead: what is left of it
    if key in v.cache.ahead_s:
        v.report.phases["baseline_compile_ahead"] = round(v.cache.ahead_s.pop(key), 4)
    if key in v.cache.compiled:
        return v.cache.compiled[key]
    try:
        if key in v.cache.failed:
            raise v.cache.failed.pop(key)
        v.progress("compiling the torch.compile baseline")
        with v.phase("baseline_compile"):
            compiled = torch.compile(v.reference)
            compiled(*inputs)  # compile now, so a failure is the baseline's, not the timing's
        v.cache.compiled[key] = compiled
        return compiled
    except Exception as e:  # noqa: BLE001  (torch.compile's failure is reported, the eager baseline still runs)
        v.finding(
            Finding(
                code="compiled_baseline_unavailable",
                evidence={"device": v.device},
                message=f"torch.compile baseline could not run here: {type(e).__name__}: {str(e)[:300]}",
            )
        )
        return None


def baseline_fns(v, inputs: list) -> dict[str, Callable]:
    """The baselines the request asks for: the reference itself and its torch.compile'd form, the latter compiled
    (or its compile waited for) only where it is timed (``resolved``)."""
    fns: dict[str, Callable] = {}
    for name in wanted_names(v):
        fns[name] = v.reference if name == "eager" else _Pending(lambda: compiled_baseline(v, inputs))
    return fns


class _Pending:
    """A baseline made only when it is about to be timed."""

    def __init__(self, make: Callable[[], Callable | None]):
        self.make = make

    def __call__(self, *args):  # never timed itself: ``resolved`` replaces it
        raise RuntimeError("a pending baseline was called before it was made")


def resolved(fns: dict) -> dict:
    """``fns`` with every pending baseline made (one that cannot be is left out, with its finding)."""
    out = {}
    for name, fn in fns.items():
        made = fn.make() if isinstance(fn, _Pending) else fn
        if made is not None:
            out[name] = made
    return out


def time_with_baselines(v, fns: dict, budget: float, check: tuple, **calls) -> tuple[dict, dict, list]:
    """(stats, samples, kept calls) for the candidate and the baselines in ``fns``: the candidate and
    the anchor timed now, the other baselines kept and scaled by the anchor's move; or, with nothing
    kept or an anchor that moved past RESCALE_LIMIT, all timed now. ``calls``: time_interleaved's call counts."""
    names = [n for n in fns if n != "candidate"]
    # device state the candidate changed is put back after each of its batches, before a baseline runs
    settle = {"candidate": v.guard.settle}
    key = timing_key(v, names)
    kept = v.cache.get(key)
    earlier: list = []
    with v.phase("baseline_compile"):
        v.cache.settled()  # nothing is timed while a compile runs
    if kept is not None and names and set(names) <= set(kept.stats) and kept.stats[names[0]].median_ms > 0:
        anchor, others = names[0], names[1:]  # (a 0 ms anchor scales nothing)
        v.progress(f"timing candidate with {anchor} (other baselines kept from an earlier verify)")
        stats, samples, earlier = time_interleaved(
            resolved({"candidate": fns["candidate"], anchor: fns[anchor]}),
            v.device,
            budget,
            feed=v.timing_feed(),
            check=check,
            shares={anchor: ANCHOR_SHARE},
            settle=settle,
            enough=precise([anchor]),
            **calls,
        )
        factor = stats[anchor].median_ms / kept.stats[anchor].median_ms if anchor in stats else 0.0
        if abs(factor - 1) <= RESCALE_LIMIT:
            for name in others:
                samples[name] = [x * factor for x in kept.samples[name]]
                stats[name] = summarize(samples[name], kept.stats[name].clock)
            age = max(0.0, time.time() - kept.at)
            v.finding(
                Finding(
                    code="baselines_reused",
                    evidence={
                        "age_s": round(age, 1),
                        "anchor": anchor,
                        "anchor_median_ms": stats[anchor].median_ms,
                        "kept_median_ms": kept.stats[anchor].median_ms,
                        "factor": round(factor, 4),
                        "scaled": others,
                        "limit": RESCALE_LIMIT,
                    },
                    message=f"{anchor} was timed now, interleaved with the candidate"
                    + (
                        f"; {', '.join(others)}: the timing kept from {age:.0f} s ago on this device, scaled by "
                        f"{factor:.3f} (how far {anchor} moved since; limit {RESCALE_LIMIT:.0%})"
                        if others
                        else ""
                    ),
                )
            )
            return stats, samples, earlier
        v.progress(f"the {anchor} anchor moved {factor - 1:+.1%}: timing every baseline again")
        v.finding(
            Finding(
                code="baselines_timed_again",
                evidence={"anchor": anchor, "drift": round(factor - 1, 4), "limit": RESCALE_LIMIT},
                message=f"the kept baseline timings were not reused: the {anchor} anchor moved {factor - 1:+.1%} "
                f"(limit {RESCALE_LIMIT:.0%}), so every callable was timed again, interleaved",
            )
        )
    fns = resolved(fns)
    names = [n for n in fns if n != "candidate"]
    stats, samples, calls_kept = time_interleaved(
        fns, v.device, budget, feed=v.timing_feed(), check=check, settle=settle, enough=precise(names), **calls
    )
    v.cache.put(timing_key(v, names), Kept({n: stats[n] for n in names}, {n: samples[n] for n in names}))
    return stats, samples, earlier + calls_kept


def warm(v, inputs: list) -> dict:
    """The ``baselines`` job, on a Verifier whose problem, policy and reference are loaded: compile
    the reference and time the baselines, unless they are kept already."""
    names = wanted_names(v)
    kept_already = v.cache.get(timing_key(v, names)) is not None
    if names and not kept_already:
        v.cache.settled()
        fns = resolved(baseline_fns(v, inputs))
        v.progress(f"timing {', '.join(fns)} ahead of the candidate")
        stats, samples, _ = time_interleaved(fns, v.device, v.req.timing_budget_s, feed=v.timing_feed())
        v.cache.put(timing_key(v, list(fns)), Kept(stats, samples))
    return {"baselines": names, "kept_already": kept_already}


def warm_inductor(device: str, stage: str = "all") -> None:
    """torch.compile's fixed cost, paid before any problem is known. Stage ``imports``: dynamo, inductor and
    Triton's compiler (most of the cost on a cold machine; bench/inductor_warmup.py measures it); stage ``compile``:
    a tiny function no problem shares compiled and run (inductor's compile workers, Triton's first kernels,
    cuBLAS). Its compiled code is never reused for a baseline: dynamo keys compiled code by the function."""
    import torch

    if stage in ("imports", "all"):
        import torch._dynamo
        import torch._inductor.compile_fx

        with contextlib.suppress(ImportError):  # inductor's GPU code is Triton; without it compile says why
            import triton.compiler  # noqa: F401
    if stage not in ("compile", "all"):
        return

    def tiny(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w + 1.0).softmax(-1)

    x = torch.randn(64, 64, device=device)
    with torch.no_grad():
        torch.compile(tiny)(x, x)
