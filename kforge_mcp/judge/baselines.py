"""The baselines of a verify (eager PyTorch and torch.compile), kept warm in the worker.

The compiled reference is kept per (problem, device, dtype), so a repeated verify does not pay
torch.compile again. The baselines' timings are kept too. The next verify times the candidate
interleaved with the first baseline (the anchor, eager when asked for), so that baseline's figure
and the speedup over it are measured now, as the first time. The other baselines (torch.compile,
whose timing costs the most: its guards run on every call) are their kept timings scaled by how far
the anchor moved since: the same clocks, host and neighbours move both alike. A ``baselines_reused``
finding says so, with the factor. An anchor that moved more than RESCALE_LIMIT means the device
changed more than a factor can stand for, and every callable is timed again, interleaved.

The ``baselines`` worker job makes both ahead of a verify, while a CPU worker builds the
candidate (pipeline.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kforge_mcp.core.schemas import Finding
from kforge_mcp.judge.timing import summarize, time_interleaved

# ``v`` below is the verify's Verifier (engine/verify.py), which imports this module.

REUSE_FOR_S = 600.0  # past this the device may have changed in ways an anchor misses
ANCHOR_SHARE = 0.5  # the anchor's timing budget, as a share of the candidate's (its figure is reported)
# beyond this the kept timings are not scaled but timed again. A host-bound eager baseline of tens of
# microseconds moves by up to about 10% between verifies a few seconds apart, so a tighter limit re-times
# on noise; a clock or neighbour change shows up as a larger step.
RESCALE_LIMIT = 0.25


@dataclass
class Kept:
    stats: dict  # name -> TimingStats
    samples: dict  # name -> samples (ms)
    at: float = field(default_factory=time.monotonic)


class BaselineCache:
    """What a worker keeps between verifies: compiled references and baseline timings."""

    def __init__(self):
        self.compiled: dict[tuple, object] = {}
        self.kept: dict[tuple, Kept] = {}


def fresh(cache: BaselineCache, key: tuple) -> Kept | None:
    """The timings kept under ``key`` while younger than REUSE_FOR_S."""
    kept = cache.kept.get(key)
    return kept if kept is not None and time.monotonic() - kept.at < REUSE_FOR_S else None


def problem_key(v) -> tuple:
    return (v.problem.source.digest, v.device, str(v.judge.dtype))


def baseline_fns(v, inputs: list) -> dict[str, Callable]:
    """The baselines the request asks for: the reference itself and its torch.compile'd form
    (compiled once per problem, device and dtype; a compile that fails is a finding, not an error)."""
    import torch

    wanted = v.req.baselines
    fns = {"eager": v.reference} if "eager" in wanted else {}
    if "compiled" not in wanted:
        return fns
    v.progress("compiling the torch.compile baseline")
    key = problem_key(v)
    compiled = v.cache.compiled.get(key)
    try:
        if compiled is None:
            with v.phase("baseline_compile"):
                compiled = torch.compile(v.reference)
                compiled(*inputs)  # compile now, so a failure is the baseline's, not the timing's
            v.cache.compiled[key] = compiled
        fns["compiled"] = compiled
    except Exception as e:  # noqa: BLE001  (torch.compile's failure is reported, the eager baseline still runs)
        v.finding(
            Finding(
                code="compiled_baseline_unavailable",
                evidence={"device": v.device},
                message=f"torch.compile baseline could not run here: {type(e).__name__}: {str(e)[:300]}",
            )
        )
    return fns


def timing_key(v, names: list[str]) -> tuple:
    return problem_key(v) + (tuple(names), v.req.fresh_timing_inputs)


def time_with_baselines(v, fns: dict, budget: float, check: tuple) -> tuple[dict, dict, list]:
    """(stats, samples, kept calls) for the candidate and the baselines in ``fns``: the candidate and
    the anchor timed now, the other baselines kept and scaled by the anchor's move; or, with nothing
    kept or an anchor that moved past RESCALE_LIMIT, all timed now."""
    names = [n for n in fns if n != "candidate"]
    # device state the candidate changed is put back after each of its batches, before a baseline runs
    settle = {"candidate": v.guard.settle}
    key = timing_key(v, names)
    kept = fresh(v.cache, key)
    earlier: list = []
    if kept is not None and names and kept.stats[names[0]].median_ms > 0:  # (a 0 ms anchor scales nothing)
        anchor, others = names[0], names[1:]
        v.progress(f"timing candidate with {anchor} (other baselines kept from an earlier verify)")
        stats, samples, earlier = time_interleaved(
            {"candidate": fns["candidate"], anchor: fns[anchor]},
            v.device,
            budget,
            feed=v.timing_feed(),
            check=check,
            shares={anchor: ANCHOR_SHARE},
            settle=settle,
        )
        factor = stats[anchor].median_ms / kept.stats[anchor].median_ms
        if abs(factor - 1) <= RESCALE_LIMIT:
            for name in others:
                samples[name] = [x * factor for x in kept.samples[name]]
                stats[name] = summarize(samples[name], kept.stats[name].clock)
            age = time.monotonic() - kept.at
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
    stats, samples, calls = time_interleaved(fns, v.device, budget, feed=v.timing_feed(), check=check, settle=settle)
    v.cache.kept[key] = Kept({n: stats[n] for n in names}, {n: samples[n] for n in names})
    return stats, samples, earlier + calls


def warm(v, inputs: list) -> dict:
    """The ``baselines`` job, on a Verifier whose problem, policy and reference are loaded: compile
    the reference and time the baselines, unless they are kept already."""
    fns = baseline_fns(v, inputs)
    key = timing_key(v, list(fns))
    kept_already = fresh(v.cache, key) is not None
    if fns and not kept_already:
        v.progress(f"timing {', '.join(fns)} ahead of the candidate")
        stats, samples, _ = time_interleaved(fns, v.device, v.req.timing_budget_s, feed=v.timing_feed())
        v.cache.kept[key] = Kept(stats, samples)
    return {"baselines": list(fns), "kept_already": kept_already}


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
