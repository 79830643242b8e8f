"""The jobs a worker does, one typed request each, and the one typed reply every job gets back. A
request is built once by the Engine from a call already validated (options.py, whose option models the
verify and profile requests extend), travels through the executor as JSON and is validated again on
arrival in the worker, the other side of a process boundary: no job reads an untyped dict. The reply
comes back the same way and is read as a ``Reply``: the value on success, the diagnostics of bad input
or the traceback of a failure."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Self, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from kforge_mcp.core.options import ProfileOptions, VerifyOptions
from kforge_mcp.core.schemas import Diagnostic
from kforge_mcp.core.source import Source


class JobRequest(BaseModel):
    """What every request is: its ``kind`` names the worker job (worker_jobs.HANDLERS)."""

    model_config = ConfigDict(extra="forbid")
    kind: ClassVar[str]

    @classmethod
    def of(cls, call: BaseModel, **resolved: Any) -> Self:
        """The request for a call already validated: the fields it shares with the call, then those the Engine
        resolved (sources, device). Not validated again here: the worker validates it on arrival."""
        values = {name: getattr(call, name) for name in cls.model_fields if name in type(call).model_fields}
        return cast(Self, cls.model_construct(**(values | resolved)))


class ProbeRequest(JobRequest):
    """Which targets and devices this machine has."""

    kind: ClassVar[str] = "probe"


class CompileRequest(JobRequest):
    kind: ClassVar[str] = "compile"
    target: str
    source: Source
    problem: Source | None = None  # traces signatures from one forward on its CPU inputs
    arch: str | None = None
    emit_ptx: bool = False


class PrebuildRequest(JobRequest):
    """Build a candidate's kernels for a device without running them (ahead of its GPU verify)."""

    kind: ClassVar[str] = "prebuild"
    target: str
    candidate: Source
    device: str


class BaselinesRequest(VerifyOptions, JobRequest):
    """The reference's baselines timed and kept in the worker, ahead of the verify that reuses them:
    a verify's request less the candidate."""

    kind: ClassVar[str] = "baselines"
    problem: Source
    target: str
    device: str  # resolved by the Engine: never None here
    fresh_timing_inputs: bool = True  # each timed call gets new inputs (off only to measure what that costs)


class VerifyRequest(BaselinesRequest):
    kind: ClassVar[str] = "verify"
    candidate: Source


class ProfileRequest(ProfileOptions, JobRequest):
    kind: ClassVar[str] = "profile"
    problem: Source
    candidate: Source | None = None  # None: the reference
    target: str
    device: str
    peaks: dict[str, Any] | None = None
    warmup: int | None = None  # default: 1 on the CPU (the interpreter is slow), else 2
    metrics: list[str] | None = None  # the metrics profiler's; default: its own (ncu: platforms/nvidia/ncu_metrics.py)
    ncu_timeout_s: float | None = None


class RooflineRequest(JobRequest):
    """The reference's speed-of-light bound, counted on the CPU; with ``measure_paths``, each compute path's
    error measured on the problem's own inputs instead (at the tolerance verify resolves from these fields)."""

    kind: ClassVar[str] = "roofline"
    problem: Source
    device_name: str | None = None
    measured_ms: float | None = None
    peaks: dict[str, Any] | None = None
    atol: float | None = None
    rtol: float | None = None
    precision: str | None = None
    measure_paths: bool = False


class WarmUpRequest(JobRequest):
    """A fixed cost paid on a device ahead of the job that would pay it: torch.compile's before any problem is known
    (stages imports, compile, all), the metrics profiler's program launched after a verify (stage profilers:
    profiling/ahead.py), or on a CPU worker what measuring a problem's compute paths first imports and runs (stage
    paths: a tiny problem measured)."""

    kind: ClassVar[str] = "warm_up"
    device: str
    stage: Literal["imports", "compile", "all", "profilers", "paths"] = "all"


REQUESTS: dict[str, type[JobRequest]] = {
    r.kind: r
    for r in (
        ProbeRequest,
        CompileRequest,
        PrebuildRequest,
        VerifyRequest,
        BaselinesRequest,
        ProfileRequest,
        RooflineRequest,
        WarmUpRequest,
    )
}


def parse_request(kind: str, payload: dict) -> JobRequest:
    """The typed request a worker received (a pydantic ValidationError names the bad field)."""
    return REQUESTS[kind].model_validate(payload)


class ReplyBase(BaseModel):
    node: str | None = None  # the cluster node that ran the job (Ray executor)


class Done(ReplyBase):
    """The job's value: a report's JSON, or what a head-start job says it did."""

    status: Literal["ok"] = "ok"
    value: dict[str, Any]
    recycle: bool = False  # the worker must not serve another job (a poisoned device, patched clocks, ...)


class InputFailure(ReplyBase):
    """The job refused its input (InputError in the worker): the caller's mistake, with diagnostics."""

    status: Literal["input"] = "input"
    message: str
    diagnostics: list[Diagnostic] = Field(default_factory=list)


class InternalFailure(ReplyBase):
    """The job raised something it did not expect: the message and the worker's traceback."""

    status: Literal["internal"] = "internal"
    message: str
    traceback: str = ""


Reply = Annotated[Done | InputFailure | InternalFailure, Field(discriminator="status")]
REPLY: TypeAdapter[Reply] = TypeAdapter(Reply)
