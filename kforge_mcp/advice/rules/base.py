"""The rule contract. A rule is a ``Rule``: a name, the parts of the report it reads (``needs``: the agent
runs it only when the report has them and otherwise says which are missing and what provides them), the
vendors it applies to, the terms of its platform's vocabulary it cannot do without (``terms``), its
thresholds (a frozen dataclass of named values) and its check, a function of the report and those thresholds
that returns Recommendations with evidence, a concrete action (worded for the report's target, ``Wording``)
and an expected gain.

expected_gain is the fraction of the profiled device time the change should save: one minus
the estimated time after the change over the time now, each rule saying how in gain_basis.
No gain exceeds what the roofline leaves (1 - T_SOL / T): nothing beats the bound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from kforge_mcp.advice import vocabulary
from kforge_mcp.platforms.base import Vocabulary
from kforge_mcp.profiling.report import Evidence, KernelProfile, Priority, ProfileReport, Recommendation

T = TypeVar("T")


@dataclass(frozen=True)
class RankingThresholds:
    high_gain: float = 0.25  # a change expected to save a quarter of the time is worth the next round
    medium_gain: float = 0.08  # under ~8% a change is within a round's timing noise and its estimate's error
    # (the calibration's median gap between predicted and realized gain is ~5 points)
    max_gain: float = 0.95  # no estimate promises the whole time: a forward keeps its launches and its bound
    negligible_gain: float = 0.005  # shown as 0%: advice priced under this (at both ends of its range) is not ranked
    min_share: float = 0.05  # kernels under 5% of the time get no advice of their own


RANKING = RankingThresholds()
PRIORITY_RANK: dict[str, int] = {"high": 0, "medium": 1, "low": 2}


@dataclass(frozen=True)
class Need:
    """A part of the report a rule reads: what it is, what provides it, and whether a report has it."""

    what: str
    where: str
    present: Callable[[ProfileReport], bool]

    def __str__(self) -> str:
        return f"{self.what} ({self.where})"


def _any_kernel(report: ProfileReport, has: Callable[[KernelProfile], Any]) -> bool:
    return any(has(k) for k in report.device_kernels())


_NCU = "Nsight Compute, profile depth='metrics' on an NVIDIA GPU"
DEVICE_KERNELS = Need(
    "device kernels with their times",
    "a GPU run: torch.profiler, Nsight Compute, proton, unitrace or xctrace",
    lambda r: bool(r.device_kernels()),
)
UNIT_BUSY_OR_BOUND = Need(
    "how busy each unit is (DRAM, the pipes) or the forward's fraction of speed of light",
    f"{_NCU}; or a problem with the profile, for its roofline",
    lambda r: (
        (r.roofline is not None and r.roofline.fraction_of_sol is not None)
        or _any_kernel(
            r, lambda k: k.dram_throughput_pct is not None or k.pipes or k.tensor_pipe_pct or k.fma_pipe_pct is not None
        )
    ),
)
ISSUE_SLOTS = Need(
    "issue-slot use per kernel", _NCU, lambda r: _any_kernel(r, lambda k: k.issue_active_pct is not None)
)
ISSUE_SLOTS_OR_LAUNCH_SHAPE = Need(
    "issue-slot use or warps per block, per kernel",
    f"{_NCU}; or a torch.profiler trace of a GPU run",
    lambda r: _any_kernel(r, lambda k: k.issue_active_pct is not None or k.warps_per_block is not None),
)
LAUNCH_GRIDS = Need(
    "each kernel's grid", "a GPU run: torch.profiler or Nsight Compute", lambda r: _any_kernel(r, lambda k: k.grid)
)
GLOBAL_SECTORS = Need(
    "global load and store sectors per kernel",
    f"{_NCU}: its memory workload analysis",
    lambda r: _any_kernel(r, lambda k: k.global_load_sectors or k.global_store_sectors),
)
SHARED_WAVEFRONTS = Need(
    "shared-memory wavefronts and bank conflicts per kernel",
    f"{_NCU}: its memory workload analysis",
    lambda r: _any_kernel(r, lambda k: k.shared_wavefronts and k.shared_bank_conflicts),
)
LOCAL_MEMORY = Need(
    "local-memory sectors or the compiler's spill count per kernel",
    f"{_NCU}; or a Triton kernel's metadata in a GPU run",
    lambda r: _any_kernel(r, lambda k: k.local_sectors or k.spills),
)
ATOMICS = Need(
    "global atomic and total instructions per kernel",
    f"{_NCU}: its source counters",
    lambda r: _any_kernel(r, lambda k: k.atomic_instructions and k.instructions),
)
NCU_RULE_RESULTS = Need(
    "Nsight Compute's own rule results", "the details page: ncu --page details", lambda r: bool(r.ncu_rules)
)
LEVERS = Need(
    "levers of the reference's structure",
    "a problem with the profile: its roofline reads the reference's FX graph",
    lambda r: r.roofline is not None and bool(r.roofline.levers) and r.roofline.sol_ms > 0,
)
WEIGHT_WORK = Need(
    "launches that read only the weights",
    "profile a Triton candidate: two forwards on different inputs are compared launch by launch",
    lambda r: bool(r.weight_work),
)
DEVICE_TIMELINE = Need(
    "the device's busy and idle spans",
    "a device timeline: unitrace or xctrace",
    lambda r: r.timeline.get("span_ms", 0) > 0,
)


def _engine_counters(report: ProfileReport) -> bool:
    counters = vocabulary.of(report).engine_counters
    return _any_kernel(report, lambda k: counters.stall in k.metrics or counters.idle in k.metrics)


XVE_COUNTERS = Need("Intel vector-engine (XVE) counters", "unitrace --metric-query on an Intel GPU", _engine_counters)
COMPILED = Need(
    "the candidate's kernels compiled for an NVIDIA arch",
    "profile a Triton candidate on the CPU: the profile compiles it for the device model's arch",
    lambda r: r.compiled is not None and bool(r.compiled.kernels),
)
# terms of the vocabulary of the platform a profile came from (Rule.terms)
_VOCABULARY = "the vocabulary of the platform the profile came from"
SM_COUNT = Need(
    "the SM count",
    f"the profile's, or the one {_VOCABULARY} assumes",
    lambda r: bool(r.sm_count or vocabulary.of(r).default_sm_count),
)
WARP_SIZE = Need("the warp size", _VOCABULARY, lambda r: vocabulary.of(r).warp_size > 0)
SECTORS = Need(
    "the memory sector size and sectors per request", _VOCABULARY, lambda r: vocabulary.of(r).sector_bytes > 0
)
CONVERT_PIPE = Need("the conversion pipe's metric", _VOCABULARY, lambda r: bool(vocabulary.of(r).convert_metric))
FLOPS_ROOFLINE = Need(
    "a roofline with the problem's FLOPs and compute paths",
    "a problem with the profile; on a CPU, a device model (profile --device-model h100)",
    lambda r: r.roofline is not None and r.roofline.flops > 0,
)


@dataclass(frozen=True)
class Wording:
    """An action's text per target (triton, cuda, cute, metal): each names its own syntax; a target without
    its own text, or a report that does not say its target, gets the neutral one."""

    neutral: str
    targets: Mapping[str, str] = field(default_factory=dict)

    def say(self, target: str | None) -> str:
        return self.targets.get(target or "", self.neutral)


@dataclass(frozen=True)
class Rule(Generic[T]):
    """A rule: ``check(report, thresholds)`` runs where every need is met, the report's vendor is one of
    ``vendors`` (None: any vendor, or a report whose vendor is unknown) and its platform's vocabulary has the
    ``terms`` it reads."""

    name: str
    check: Callable[[ProfileReport, T], list[Recommendation]]
    thresholds: T
    needs: tuple[Need, ...] = ()
    vendors: frozenset[str] | None = None
    terms: tuple[Need, ...] = ()

    def __call__(self, report: ProfileReport) -> list[Recommendation]:
        return self.check(report, self.thresholds)

    def why_not(self, report: ProfileReport) -> str | None:
        """Why the rule cannot run on this report, or None when it can."""
        missing = [str(n) for n in self.needs if not n.present(report)]
        if missing:
            return "needs " + "; ".join(missing)
        vendor = vocabulary.vendor(report)
        if self.vendors is not None and vendor is not None and vendor not in self.vendors:
            return f"applies to {' and '.join(sorted(self.vendors))} profiles; this one is from {vendor}"
        lacking = [str(n) for n in self.terms if not n.present(report)]
        return "needs " + "; ".join(lacking) if lacking else None


def priority_for(gain: float, t: RankingThresholds = RANKING) -> Priority:
    return "high" if gain >= t.high_gain else "medium" if gain >= t.medium_gain else "low"


def recommendation(**kw) -> Recommendation:
    for key in ("expected_gain", "expected_gain_high"):
        if kw.get(key) is not None:
            kw[key] = round(max(0.0, min(RANKING.max_gain, kw[key])), 3)
    kw.setdefault("priority", priority_for(kw["expected_gain"]))
    return Recommendation(**kw)


def shares(report: ProfileReport) -> dict[str, float]:
    ks = report.device_kernels()
    total = sum(k.device_ms for k in ks)
    return {k.name: (k.device_ms / total if total > 0 else 0.0) for k in ks}


def hot_kernels(report: ProfileReport, min_share: float = RANKING.min_share) -> list[tuple[KernelProfile, float]]:
    share = shares(report)
    return [(k, share[k.name]) for k in report.device_kernels() if share.get(k.name, 0) >= min_share]


def of_a_convolution(k: KernelProfile, report: ProfileReport) -> bool:
    """The kernel computes a convolution: so classified, or the problem the profile came with has one."""
    return k.category == "conv" or bool(report.roofline and report.roofline.convs)


def pct(value: float | None) -> str | None:
    return None if value is None else f"{value:.1f}%"


def ev(metric: str, value, good: str = "", kernel: str | None = None) -> Evidence:
    return Evidence(metric=metric, value=value, good=good, kernel=kernel)


def busiest_unit(k: KernelProfile, v: Vocabulary, count_fma: bool = True) -> tuple[str, float]:
    """The kernel's busiest unit and its % of peak: DRAM, a tensor pipe, or (outside GEMMs) the FMA/ALU pipes."""
    units = {"DRAM": k.dram_throughput_pct}
    for p in v.tensor_pipes:
        units[f"{p} pipe"] = k.pipes.get(p)
    if k.tensor_pipe_pct is not None and not any(k.pipes.get(p) for p in v.tensor_pipes):
        units["tensor pipe"] = k.tensor_pipe_pct
    if count_fma:
        units["FMA pipe"] = k.fma_pipe_pct
        units["ALU pipe"] = k.pipes.get(v.alu_pipe)
    known = {n: val for n, val in units.items() if val is not None}
    return max(known.items(), key=lambda x: x[1]) if known else ("", 0.0)


def remaining(report: ProfileReport) -> float | None:
    """1 - T_SOL / T: the most any change can save, when the roofline is known and holds."""
    r = report.roofline
    if r is None or r.fraction_of_sol is None:
        return None
    return max(0.0, 1.0 - r.fraction_of_sol)
