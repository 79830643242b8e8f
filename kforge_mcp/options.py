"""The options of verify and profile, each default and bound written once: the library (api.py),
the MCP tools, the CLI and the loop take them from here. ``VERIFY`` and ``PROFILE`` hold the
defaults; the ``Annotated`` aliases carry the bounds the MCP tools check (the library checks its
own, looser ones: a timeout above an hour is fine from Python)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

BASELINES = ("eager", "compiled")
# KernelBench's fp32 tolerance; half precision gets the looser one harnesses use for it. The verdict
# (engine/correctness.py) and the roofline's choice of compute path (analysis/roofline.py) both read it.
DEFAULT_TOLERANCE = {"float32": 1e-4, "float64": 1e-6, "float16": 1e-2, "bfloat16": 1e-2}
FALLBACK_TOLERANCE = 1e-4


def default_tolerance(dtype) -> float:
    """atol and rtol when none is given, for a torch dtype (or its name)."""
    return DEFAULT_TOLERANCE.get(str(dtype).removeprefix("torch."), FALLBACK_TOLERANCE)


Trials = Annotated[int, Field(ge=1, le=100)]
Tolerance = Annotated[float | None, Field(ge=0)]
TimeoutS = Annotated[float, Field(gt=0, le=3600)]
Baselines = list[Literal["eager", "compiled"]]
Depth = Literal["timeline", "metrics"]
Iterations = Annotated[int, Field(ge=1, le=100)]


class VerifyOptions(BaseModel):
    device: str | None = None
    trials: Trials = 5
    atol: float | None = None  # default per dtype (correctness.py)
    rtol: float | None = None
    timeout_s: float = Field(300.0, gt=0)
    baselines: Baselines = Field(default_factory=lambda: list(BASELINES))
    timing_budget_s: float = Field(1.0, gt=0)


class ProfileOptions(BaseModel):
    device: str | None = None
    depth: Depth = "timeline"
    iterations: Iterations = 5
    proton: bool = False
    timeout_s: float = Field(300.0, gt=0)


VERIFY = VerifyOptions()
PROFILE = ProfileOptions()
