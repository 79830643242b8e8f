"""The arguments of every call, one pydantic model per verb, each description, bound and default written
once. The MCP tools' input schemas, the Engine's keyword arguments, the CLI's options and the worker
requests (requests.py, which extend these) all come from them, and a call is validated against its
model once, where it comes in: by the MCP SDK for a tool, by ``Arguments.validated`` for the library and
the CLI (an InputError naming the field)."""

from __future__ import annotations

import difflib
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kforge_mcp.core.errors import InputError

Baseline = Literal["eager", "compiled"]
BASELINES: tuple[Baseline, ...] = ("eager", "compiled")
DEFAULT_TARGET = "triton"  # the target a call names none of: runs everywhere (the interpreter on a CPU)
# KernelBench's fp32 tolerance; half precision gets the looser one harnesses use for it. The verdict
# (judge/correctness.py) and the roofline's choice of compute path (judge/roofline/paths.py) both read it.
DEFAULT_TOLERANCE = {"float32": 1e-4, "float64": 1e-6, "float16": 1e-2, "bfloat16": 1e-2}
FALLBACK_TOLERANCE = 1e-4


def default_tolerance(dtype) -> float:
    """atol and rtol when none is given, for a torch dtype (or its name)."""
    return DEFAULT_TOLERANCE.get(str(dtype).removeprefix("torch."), FALLBACK_TOLERANCE)


# The precision a verdict is judged at: the dtype inputs and both models run in (tf32 keeps fp32
# data and allows TF32 math) and the default tolerance. KernelBench's fp32 1e-4, bf16/fp16 1e-2;
# tf32's 5e-3 is what PyTorch's own tests allow TF32 matmuls (its 2^-11 rounding fails 1e-4).
PRECISION_DTYPE = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}
PRECISION_TOLERANCE = {"fp32": 1e-4, "tf32": 5e-3, "bf16": 1e-2, "fp16": 1e-2}
DTYPE_PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
Precision = Literal["fp32", "tf32", "bf16", "fp16"]


def check_precision(precision, atol, rtol, where: str = "verify", seed=None) -> None:
    """An InputError naming the field for an unknown precision, a tolerance that is not a
    non-negative number or a bad seed (``where``: 'problem ...' for the names a problem declares)."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31):
        raise InputError(f"{where}: seed must be an integer in [0, 2**31), got {seed!r}")
    if precision is not None and precision not in PRECISION_TOLERANCE:
        raise InputError(f"{where}: precision {precision!r} is not one of {', '.join(PRECISION_TOLERANCE)}")
    for field, value in (("atol", atol), ("rtol", rtol)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise InputError(f"{where}: {field} must be a number, got {value!r}")
        if value < 0:
            raise InputError(f"{where}: {field} must be >= 0, got {value}")


# A correctness call of the candidate that outlives its limit is a hang: the server kills its worker then,
# not at the job's timeout. The limit follows from the reference's own time for one call, with floors.
TRIAL_SCALE = 100  # x the reference's time
INTERPRETER_TRIAL_SCALE = 1000  # Triton's CPU interpreter runs kernels far slower than torch's CPU ops
CANDIDATE_CALL_SCALE = 4  # x the candidate's slowest call so far on the same shapes
# the floors at the default timeout; they grow and shrink with the job's timeout
TRIAL_FLOOR_S = 20.0
FIRST_CALL_FLOOR_S = 120.0  # a first call on new shapes also compiles (and autotunes) the candidate's kernels
DEFAULT_TIMEOUT_S = 300.0
TRIAL_LIMIT_TEXT = (
    f"each call of the candidate has its own limit too, from the work of the shapes that run: the largest of "
    f"{TRIAL_SCALE}x the reference's time ({INTERPRETER_TRIAL_SCALE}x interpreted) and {CANDIDATE_CALL_SCALE}x its "
    f"slowest call so far, at least {TRIAL_FLOOR_S / DEFAULT_TIMEOUT_S:.3g} of the timeout "
    f"({FIRST_CALL_FLOOR_S / DEFAULT_TIMEOUT_S:.2g} for a first call, which compiles)"
)

# ---- each argument, written once: the models below (and the tools' models) declare their fields with these ----

TARGET_TEXT = "the kernel language (list_targets names them)"
PROBLEM: Any = Field(
    description="reference in KernelBench form (class Model, get_inputs, get_init_inputs): text or a .py path"
)
CANDIDATE: Any = Field(description="source defining class ModelNew: text or a .py path")
TARGET: Any = Field(DEFAULT_TARGET, description=TARGET_TEXT)
DEVICE: Any = Field(None, description="e.g. cuda:0, xpu:0 or cpu; default: the best one here")
TIMEOUT_S: Any = Field(DEFAULT_TIMEOUT_S, gt=0, le=3600, description="seconds; the worker is killed after this")
TOLERANCE = "default per precision: fp32 1e-4, tf32 5e-3, fp16/bf16 1e-2"


def field_of(model: type[BaseModel], name: str) -> Any:
    """A field as ``model`` declares it (bounds, default, description), to declare it again in another model
    without writing it twice."""
    return model.model_fields[name]


class Arguments(BaseModel):
    """A call's arguments: a misspelt name is an error, not silently the default."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def validated(cls, where: str, **values: Any) -> Self:
        """The arguments validated, once: an InputError saying which field was wrong and how."""
        try:
            return cls.model_validate(values)
        except ValidationError as e:
            raise InputError(f"{where}: {'; '.join(describe(cls, err) for err in e.errors())}") from None


def describe(model: type[BaseModel], err: Any) -> str:
    """One pydantic error in the words of the field: 'trials must be an integer in [1, 100], got 0'."""
    name = ".".join(map(str, err["loc"])) or "arguments"
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(name, model.model_fields, n=1)
        return f"unknown argument '{name}'" + (f" (did you mean '{close[0]}'?)" if close else "")
    if kind == "missing":
        return f"{name} is required"
    if kind == "literal_error":
        return f"{name} must be {ctx['expected']}, got {got!r}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"{name} must be an integer, got {got!r}"
    if kind in ("float_type", "float_parsing", "finite_number"):
        return f"{name} must be a number, got {got!r}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f"{name} must be {bounds(model, err['loc'][0])}, got {got!r}"
    return f"{name}: {err['msg']}"


def bounds(model: type[BaseModel], field: str) -> str:
    """'>= 0', 'an integer in [1, 100]', 'in (0, 3600]': a field's range as its constraints state it."""
    info = model.model_fields.get(str(field))
    limits = {
        k: getattr(m, k) for m in (info.metadata if info else []) for k in ("ge", "gt", "le", "lt") if hasattr(m, k)
    }
    low = ("[", limits["ge"]) if "ge" in limits else ("(", limits["gt"]) if "gt" in limits else None
    high = (limits["le"], "]") if "le" in limits else (limits["lt"], ")") if "lt" in limits else None
    kind = "an integer " if info is not None and info.annotation in (int, int | None) else ""
    if low and high:
        return f"{kind}in {low[0]}{low[1]}, {high[0]}{high[1]}"
    if low:
        return f"{kind}{'>=' if low[0] == '[' else '>'} {low[1]}"
    assert high is not None  # a range error comes from one of the four
    return f"{kind}{'<=' if high[1] == ']' else '<'} {high[0]}"


class VerifyOptions(Arguments):
    """How a candidate is judged and timed."""

    device: str | None = DEVICE
    trials: int = Field(5, ge=1, le=100, description="correctness trials, each on fresh inputs")
    atol: float | None = Field(None, ge=0, allow_inf_nan=False, description=f"absolute tolerance; {TOLERANCE}")
    rtol: float | None = Field(None, ge=0, allow_inf_nan=False, description=f"relative tolerance; {TOLERANCE}")
    precision: Precision | None = Field(
        None,
        description="dtype both models run in and the default tolerance; default: the problem's, else its dtypes",
    )
    seed: int | None = Field(
        None, ge=0, lt=2**31, description="seed of inputs and weights; default: fresh per call (reported)"
    )
    timeout_s: float = Field(
        DEFAULT_TIMEOUT_S, gt=0, le=3600, description=f"seconds; the worker is killed after this; {TRIAL_LIMIT_TEXT}"
    )
    baselines: list[Baseline] = Field(list(BASELINES), description="baselines to time")
    timing_budget_s: float = Field(1.0, gt=0, le=60, description="seconds of timed calls per model")
    timing_sets: Literal["main", "all"] = Field(
        "main",
        description="'main': time get_inputs() only; 'all': also each get_input_sets() shape, with its speedup "
        "and the geomean over all",
    )


class VerifyCall(VerifyOptions):
    """verify: a candidate checked against its reference and timed."""

    problem: str = PROBLEM
    candidate: str = CANDIDATE
    target: str = Field(description=TARGET_TEXT)


class ProfileOptions(Arguments):
    """How a run is profiled."""

    device: str | None = DEVICE
    depth: Literal["timeline", "metrics"] = Field(
        "timeline",
        description="timeline: torch.profiler kernels and launches; metrics: also Nsight Compute metrics "
        "(occupancy, throughput, coalescing, stalls) when ncu is on PATH",
    )
    iterations: int = Field(5, ge=1, le=100, description="profiled forwards (after the warm-up ones)")
    proton: bool = Field(False, description="also run Triton's proton profiler (a process of its own)")
    timeout_s: float = TIMEOUT_S


class ProfileCall(ProfileOptions):
    """profile: where a candidate's (or the reference's) time goes."""

    problem: str = PROBLEM
    candidate: str | None = Field(None, description="source defining class ModelNew; omit to profile the reference")
    target: str = Field(description=TARGET_TEXT)
    device_model: str | None = Field(
        None,
        description="a device of the peaks table (e.g. h200, b200): the roofline is that device's, marked as a "
        "model, from any machine",
    )


class CompileCall(Arguments):
    """compile: a candidate's kernels built without running them."""

    target: str = Field(description=TARGET_TEXT)
    source: str | None = Field(None, description="the candidate: source text or a .py path")
    candidate: str | None = Field(None, description="the same as source, under the name verify and profile use")
    arch: str | None = Field(None, description="e.g. sm_90a; default: the local GPU's, else the target's")
    problem: str | None = Field(
        None,
        description="the reference: kernels are compiled for the argument types and constexprs of a real forward "
        "instead of types inferred from the source",
    )
    emit_ptx: bool = Field(False, description="include each kernel's PTX (and SASS where the target gives it)")
    timeout_s: float = TIMEOUT_S

    def code(self) -> str:
        """The candidate, given under either name."""
        if self.source is not None and self.candidate is not None and self.source != self.candidate:
            raise InputError("compile: give the code as source or as candidate, not both")
        code = self.source if self.source is not None else self.candidate
        if code is None:
            raise InputError("compile needs the candidate: source (or candidate), source text or a path to a .py file")
        return code


class AnalyzeCall(Arguments):
    """analyze_profile: advice from a profile report, a captured profiler file or a screenshot."""

    profile: dict[str, Any] | None = Field(None, description="a report returned by the profile tool")
    path: str | None = Field(
        None,
        description="a captured file: Nsight Compute CSV (--csv --page raw or details), .ncu-rep, torch.profiler "
        "chrome trace JSON, proton .hatchet, unitrace chrome trace JSON or --metric-query CSV, or an xctrace "
        "export of metal-gpu-intervals (64 MB at most)",
    )
    image: str | None = Field(None, description="a screenshot of a GUI profiler (needs an LLM that reads images)")
    problem: str | None = Field(None, description="the reference: adds its roofline and the levers of its structure")
    device_model: str | None = Field(
        None,
        description="the device of the peaks table its roofline is for (e.g. 'h100'), where the profile names none",
    )
    forwards: int | None = Field(None, ge=1, description="forwards the captured file holds (default: inferred)")

    def given(self) -> str:
        """Which of profile, path and image was given: exactly one must be."""
        given = [n for n in ("profile", "path", "image") if getattr(self, n)]
        if len(given) != 1:
            raise InputError(
                "analyze_profile: pass exactly one of profile (a report), path (a captured file) or image"
                + (f"; got {', '.join(given)}" if given else "")
            )
        return given[0]


VERIFY = VerifyOptions()
PROFILE = ProfileOptions()
