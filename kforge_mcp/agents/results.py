"""The loop's options and what it returns (pydantic models the tools and the library share), and
how attempts are ranked: the best correct one, and a round's best."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from kforge_mcp.agents.feedback import failure_feedback
from kforge_mcp.core.errors import InputError
from kforge_mcp.core.options import VerifyOptions
from kforge_mcp.core.schemas import JobAware
from kforge_mcp.store import Attempt


class LoopOptions(VerifyOptions):
    """The loop's own options; the verify options (device, trials, tolerances, baselines, timeouts)
    come from VerifyOptions, so their defaults are the library's and the tools'."""

    max_iterations: int = Field(8, ge=1, le=200, description="attempts in all, functional and optimization")
    max_seconds: float | None = Field(None, gt=0, description="wall-time budget; checked between rounds")
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="token budget of the whole run (prompt + completion, all "
        "attempts); checked between rounds. Providers report exact counts; MCP sampling and "
        "plain-str generate callables report none, so there it is estimated as "
        "len(prompt + reply) / 4",
    )
    candidates_per_round: int = Field(
        1,
        ge=1,
        le=16,
        description="replies asked for the same prompt each round "
        "(concurrently), checked side by side as the executor allows; each is an "
        "attempt, and the round's best drives the next prompt",
    )
    stop_at_sol: float | None = Field(
        0.9,
        gt=0,
        description="stop once a correct candidate reaches this fraction "
        "of speed of light (when the device's peaks are known)",
    )
    stop_at_limit: bool = Field(
        True,
        description="stop once the analysis agent says the best candidate's kernels are at their limit "
        "(a pipe or DRAM saturated and near the true bound)",
    )
    optimize: bool = Field(True, description="after the first correct candidate, keep optimizing")
    profile: bool = Field(True, description="profile correct candidates and feed the analysis agent's advice back")
    profile_depth: Literal["timeline", "metrics"] = Field(
        "metrics",
        description="metrics: Nsight Compute's pipe, memory and stall figures where ncu runs (the timeline alone "
        "elsewhere); the analysis agent needs them on GPUs",
    )
    reference_impl: str | None = Field(None, description="a correct implementation for another target to port")
    reference_target: str | None = None
    provider_model: str | None = Field(None, description="the provider's model, kept so a resume asks the same one")
    provider_base_url: str | None = Field(None, description="the provider's endpoint, kept for a resume (never a key)")

    model_config = {"extra": "forbid"}  # a misspelt option is an error, not silently the default

    @classmethod
    def parse(cls, options: LoopOptions | dict | None) -> LoopOptions:
        if isinstance(options, cls):
            return options
        try:
            return cls.model_validate(options or {})
        except ValidationError as e:
            bad = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())
            raise InputError(f"bad loop option: {bad}") from None


class AttemptSummary(BaseModel):
    index: int
    pass_: str = Field(alias="pass", serialization_alias="pass")
    verdict: str | None = Field(
        None,
        description="pass, fail, suspicious, error; 'no_code' when nothing was extracted, "
        "'compile_error' when it did not compile",
    )
    correct: bool = False
    speedup: float | None = None
    problem: str | None = Field(None, description="the first lines of the feedback, when it failed")
    tokens: int | None = Field(None, description="tokens the reply cost (prompt + completion; estimated for sampling)")
    round: int | None = Field(None, description="the round it was generated in (same prompt, same round)")

    model_config = {"populate_by_name": True}


class BestCandidate(BaseModel):
    index: int
    candidate: str
    speedup: float | None = None
    verify_report: dict[str, Any] | None = None


class LoopResult(BaseModel):
    run_id: str
    status: str = Field(description="running, done, failed, stopped (cancelled) or interrupted (its process died)")
    stop_reason: str | None = None
    best: BestCandidate | None = None
    attempts: list[AttemptSummary] = Field(default_factory=list)
    tokens: int = Field(0, description="tokens spent, summed over the attempts (see LoopOptions.max_tokens)")
    report: str | None = Field(
        None,
        description="path of the run's HTML report (speedup and verdict per attempt, "
        "the best kernel); a PNG of the plot lies beside it",
    )
    report_uri: str | None = Field(None, description="the same report as an MCP resource")
    job_id: str | None = Field(None, description="set when run_loop outlived wait_s; poll job_status / job_result")


class SubmitResult(JobAware):
    run_id: str
    attempt: int | None = None
    verdict: str | None = None
    correct: bool = False
    speedup: float | None = None
    error: str | None = Field(None, description="why the reply could not be checked (e.g. no ModelNew)")
    compile_report: dict[str, Any] | None = None
    verify_report: dict[str, Any] | None = None
    recommendations: list[dict[str, Any]] | None = None
    feedback: str | None = Field(None, description="what the next prompt tells the agent about this attempt")
    next_prompt: str | None = Field(None, description="the prompt for the next attempt; None when done")
    done: bool = False
    stop_reason: str | None = None
    best: BestCandidate | None = None


def summarize(a: Attempt) -> AttemptSummary:
    verdict: str | None
    problem: str | None
    if a.error:
        verdict, problem = "no_code", a.error
    elif a.compile_report is not None and not a.compile_report.get("ok"):
        verdict, problem = "compile_error", failure_feedback(a)
    else:
        verdict = (a.verify_report or {}).get("verdict")
        problem = None if a.correct else failure_feedback(a)
    return AttemptSummary(
        index=a.index,
        pass_=a.pass_,
        verdict=verdict,
        correct=a.correct,
        speedup=a.speedup,
        problem=problem[:500] if problem else None,
        tokens=a.tokens,
        round=a.round,
    )


def best_of(attempts: list[Attempt]) -> Attempt | None:
    correct = [a for a in attempts if a.correct]
    return max(correct, key=lambda a: (a.speedup or 0.0, -a.index)) if correct else None


# how far a failed attempt got: the furthest one tells the agent the most
_PROGRESS = {"suspicious": 4, "fail": 3, "error": 2, "compile_error": 1, "no_code": 0}


def last_round(attempts: list[Attempt]) -> list[Attempt]:
    """The attempts of the latest round (one attempt when rounds are not recorded)."""
    key = lambda a: a.index if a.round is None else a.round  # noqa: E731
    last = key(attempts[-1])
    return [a for a in attempts if key(a) == last]


def round_best(attempts: list[Attempt]) -> Attempt:
    """A round's best: correct and fastest, else the failure that got furthest (the earliest on a tie)."""
    best = best_of(attempts)
    if best is not None:
        return best
    return max(attempts, key=lambda a: (_PROGRESS.get(summarize(a).verdict or "", 0), -a.index))
