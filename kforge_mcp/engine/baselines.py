"""The baselines of a verify (eager PyTorch and torch.compile), kept warm in the worker.

The compiled reference is kept per (problem, device, dtype), so a repeated verify does not pay
torch.compile again. The baselines' timings are kept too, and reused while the device still runs
as it did when they were taken: the next verify times the candidate interleaved with a short run
of one baseline (the anchor). An anchor within ANCHOR_TOLERANCE of its kept median means the
same clocks and the same neighbours, and the kept timings stand (a ``baselines_reused`` finding
says so); otherwise every callable is timed again, interleaved, as the first time.

The ``baselines`` worker job makes both ahead of a verify, while a CPU worker builds the
candidate (pipeline.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from ..schemas import Finding
from .timing import time_interleaved

# ``v`` below is the verify's Verifier (engine/verify.py), which imports this module.

REUSE_FOR_S = 600.0  # past this the device may have changed in ways an anchor misses
ANCHOR_SHARE = 0.25  # the anchor's timing budget, as a share of the candidate's
# the anchor's median against the kept one: beyond this, time everything again; or beyond half the kept
# timing's own interquartile spread, where that is wider (a host-bound 20 us kernel moves by more
# than 2% between runs, and timing its baselines again would give a number no truer)
ANCHOR_TOLERANCE = 0.02


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

    wanted = v.req.get("baselines", ["eager", "compiled"])
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
    return problem_key(v) + (tuple(names), bool(v.req.get("fresh_timing_inputs", True)))


def time_with_baselines(v, fns: dict, budget: float, check: tuple) -> tuple[dict, dict, list]:
    """(stats, samples, kept calls) for the candidate and the baselines in ``fns``: the kept
    baseline timings when an anchor says the device still runs as it did, else all timed now."""
    names = [n for n in fns if n != "candidate"]
    key = timing_key(v, names)
    kept = fresh(v.cache, key)
    earlier: list = []
    if kept is not None and names:
        anchor = names[0]
        v.progress(f"timing candidate with a short {anchor} anchor (baselines kept from an earlier verify)")
        stats, samples, earlier = time_interleaved(
            {"candidate": fns["candidate"], anchor: fns[anchor]},
            v.device,
            budget,
            feed=v.timing_feed(),
            check=check,
            shares={anchor: ANCHOR_SHARE},
        )
        drift = stats[anchor].median_ms / kept.stats[anchor].median_ms - 1
        tolerance = max(ANCHOR_TOLERANCE, kept.stats[anchor].spread / 2)
        if abs(drift) <= tolerance:
            v.finding(
                Finding(
                    code="baselines_reused",
                    evidence={
                        "age_s": round(time.monotonic() - kept.at, 1),
                        "anchor": anchor,
                        "anchor_median_ms": stats[anchor].median_ms,
                        "kept_median_ms": kept.stats[anchor].median_ms,
                        "tolerance": round(tolerance, 4),
                    },
                    message=f"baseline timings ({', '.join(names)}) kept from {time.monotonic() - kept.at:.0f} s "
                    f"ago on this device: the {anchor} anchor timed with the candidate now is within "
                    f"{abs(drift):.1%} of its kept median (limit {tolerance:.1%}: 2% or half the kept spread)",
                )
            )
            return (
                {"candidate": stats["candidate"], **kept.stats},
                {"candidate": samples["candidate"], **kept.samples},
                earlier,
            )
        v.progress(f"the {anchor} anchor moved {drift:+.1%}: timing every baseline again")
        v.finding(
            Finding(
                code="baselines_timed_again",
                evidence={"anchor": anchor, "drift": round(drift, 4), "tolerance": round(tolerance, 4)},
                message=f"the kept baseline timings were not reused: the {anchor} anchor moved {drift:+.1%} "
                f"(limit {tolerance:.1%}), so every callable was timed again, interleaved",
            )
        )
    stats, samples, calls = time_interleaved(fns, v.device, budget, feed=v.timing_feed(), check=check)
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
        stats, samples, _ = time_interleaved(
            fns, v.device, float(v.req.get("timing_budget_s", 1.0)), feed=v.timing_feed()
        )
        v.cache.kept[key] = Kept(stats, samples)
    return {"baselines": list(fns), "kept_already": kept_already}
