"""The options of verify and profile, each default and bound written once: the library (api.py),
the MCP tools, the CLI and the loop take them from here. ``VERIFY`` and ``PROFILE`` hold the
defaults; the ``Annotated`` aliases carry the bounds the MCP tools check (the library checks its
own, looser ones: a timeout above an hour is fine from Python)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from kforge_mcp.core.errors import InputError

BASELINES: tuple[Literal["eager", "compiled"], ...] = ("eager", "compiled")
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
    non-negative number or a bad seed (``where``: 'verify' for arguments, 'problem ...' for its names)."""
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
TRIAL_FLOOR_S = 20.0
FIRST_CALL_FLOOR_S = 120.0  # a first call on new shapes also compiles (and autotunes) the candidate's kernels
TRIAL_LIMIT_TEXT = (
    f"each correctness call of the candidate also has a limit: {TRIAL_SCALE}x the reference's time "
    f"({INTERPRETER_TRIAL_SCALE}x under the Triton interpreter), at least {TRIAL_FLOOR_S:g} s, "
    f"{FIRST_CALL_FLOOR_S:g} s for a first call, which compiles"
)

Trials = Annotated[int, Field(ge=1, le=100)]
TimingSets = Literal["main", "all"]  # time get_inputs() only, or each get_input_sets() shape as well
Tolerance = Annotated[float | None, Field(ge=0)]
Seed = Annotated[int | None, Field(ge=0, lt=2**31)]
TimeoutS = Annotated[float, Field(gt=0, le=3600)]
Baselines = list[Literal["eager", "compiled"]]
Depth = Literal["timeline", "metrics"]
Iterations = Annotated[int, Field(ge=1, le=100)]


class VerifyOptions(BaseModel):
    device: str | None = None
    trials: Trials = 5
    atol: float | None = None  # default per precision, else per dtype (correctness.py)
    rtol: float | None = None
    precision: Precision | None = None  # default: the problem's PRECISION, else its dtypes
    seed: int | None = None  # default: a fresh one per call, reported
    timeout_s: float = Field(300.0, gt=0)
    baselines: Baselines = Field(default_factory=lambda: list(BASELINES))
    timing_budget_s: float = Field(1.0, gt=0)
    timing_sets: TimingSets = "main"  # "all": time every get_input_sets() shape too


class ProfileOptions(BaseModel):
    device: str | None = None
    depth: Depth = "timeline"
    iterations: Iterations = 5
    proton: bool = False
    timeout_s: float = Field(300.0, gt=0)


VERIFY = VerifyOptions()
PROFILE = ProfileOptions()
