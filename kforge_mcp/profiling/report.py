"""The analysis result the rules and the agent produce; the profile they read is core/profile.py's."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kforge_mcp.core.profile import KernelProfile, NcuRule, ProfileReport, StallReason
from kforge_mcp.core.schemas import JobAware, Roofline

# advice/ and the entry points import the profile models from here, beside the analysis result
__all__ = [
    "AnalysisReport",
    "Evidence",
    "KernelProfile",
    "NcuRule",
    "Priority",
    "ProfileReport",
    "Recommendation",
    "RuleNotRun",
    "StallReason",
]

Priority = Literal["high", "medium", "low"]


class Evidence(BaseModel):
    metric: str
    value: float | str | None
    good: str = Field("", description="what a good value looks like")
    kernel: str | None = None


class Recommendation(BaseModel):
    rule: str = Field(description="the rule that fired")
    title: str
    evidence: list[Evidence] = Field(default_factory=list)
    action: str = Field(description="the concrete change to make")
    expected_gain: float = Field(description="estimated fraction of the profiled device time saved (0..1)")
    expected_gain_high: float | None = Field(
        None,
        description="the estimate at the high end of its range, where the rule's model is a range (expected_gain "
        "takes the low end)",
    )
    gain_basis: str = Field("", description="how expected_gain was estimated")
    priority: Priority = "low"
    kernels: list[str] = Field(default_factory=list)
    stop: bool = Field(False, description="the kernel is at its limit: further rounds are unlikely to pay off")
    lowers_bound: bool = Field(
        False,
        description="the change removes work from the problem itself (the reference's structure), so the "
        "speed-of-light bound drops too and the gain is not capped by it",
    )
    change: str | None = Field(
        None, description="the change proposed, named alike by every rule that proposes it: one recommendation each"
    )
    also_from: list[str] = Field(
        default_factory=list, description="other rules that proposed the same change, merged in with their evidence"
    )


class RuleNotRun(BaseModel):
    rule: str
    reason: str = Field(description="what the rule needs that the profile lacks, and what provides it")


class AnalysisReport(JobAware):
    recommendations: list[Recommendation] = Field(default_factory=list)
    summary: str = ""
    narrative: str | None = Field(None, description="an LLM's reading of the evidence, when one is configured")
    source: str | None = Field(None, description="the profile's source")
    file: str | None = None
    roofline: Roofline | None = None
    stop: bool = Field(
        False, description="the agent recommends stopping: most of the time is in kernels at their limit"
    )
    no_gain: list[Recommendation] = Field(
        default_factory=list,
        description="advice the rules priced at no gain on this profile (a saving outside the roofline's model, "
        "kernels at their limit while others are not, residues under 0.5%): kept for its evidence, not ranked",
    )
    rules_not_run: list[RuleNotRun] = Field(
        default_factory=list, description="rules the profile lacks the parts for, each with what it needs"
    )
    notes: list[str] = Field(default_factory=list)
