"""The precision a verify is judged at, inside a worker: the request's ``precision`` and
tolerances, else the problem's ``PRECISION``, ``ATOL`` and ``RTOL``, else the dtypes of its
outputs (KernelBench's defaults, options.py). With a precision, floating inputs and both models
are cast to its dtype before they run. torch's own switches for reduced-precision math (TF32
matmul and convolution, reduced-precision reductions) are pinned for the reference, so a
candidate that turns TF32 on cannot move the reference's outputs towards its own."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from kforge_mcp.core.options import (
    DTYPE_PRECISION,
    PRECISION_DTYPE,
    PRECISION_TOLERANCE,
    check_precision,
    default_tolerance,
)
from kforge_mcp.core.requests import BaselinesRequest, RooflineRequest
from kforge_mcp.core.schemas import Finding

PROBLEM_NAMES = ("PRECISION", "ATOL", "RTOL")


@dataclass
class Judgement:
    precision: str | None  # None: judged per output dtype (the name is filled in from the first output)
    atol: float | None
    rtol: float | None
    source: str = "default"  # 'request', 'problem' or 'default'

    @property
    def dtype(self):
        import torch

        return getattr(torch, PRECISION_DTYPE[self.precision]) if self.precision else None

    def cast(self, inputs: list) -> list:
        """Floating tensors to the precision's dtype (integers and flags stay as they are)."""
        import torch

        if self.precision is None:
            return inputs
        dtype = self.dtype
        return [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]

    def settle(self, output_dtype) -> None:
        """Name the precision and tolerances that judged a call with no precision given: the first output's."""
        name = str(output_dtype).removeprefix("torch.")
        if self.precision is None:
            self.precision = DTYPE_PRECISION.get(name, name)
        default = PRECISION_TOLERANCE.get(self.precision) or default_tolerance(name)
        self.atol = default if self.atol is None else self.atol
        self.rtol = default if self.rtol is None else self.rtol


def resolve(req: BaselinesRequest | RooflineRequest, problem) -> Judgement:
    """The request's choice wins, then the problem's declaration (checked: a bad one is an input
    error naming the problem's field; its ATOL and RTOL hold at its own PRECISION only), then the
    per-precision or per-dtype defaults."""
    declared = {n: getattr(problem.module, n, None) for n in PROBLEM_NAMES}
    where = f"problem {problem.source.name}"
    if declared["PRECISION"] is not None and declared["PRECISION"] not in PRECISION_TOLERANCE:
        check_precision(declared["PRECISION"], None, None, f"{where}: PRECISION")
    check_precision(None, declared["ATOL"], None, f"{where}: ATOL")
    check_precision(None, None, declared["RTOL"], f"{where}: RTOL")
    precision = req.precision or declared["PRECISION"]
    source = "request" if req.precision else "problem" if declared["PRECISION"] else "default"
    default = PRECISION_TOLERANCE[precision] if precision else None
    if declared["PRECISION"] and precision != declared["PRECISION"]:
        declared["ATOL"] = declared["RTOL"] = None  # the problem's tolerances belong to its own precision
    atol = _first(req.atol, declared["ATOL"], default)
    rtol = _first(req.rtol, declared["RTOL"], default)
    return Judgement(precision, atol, rtol, source)


def _first(*values):
    return next((v for v in values if v is not None), None)


FLAGS = (
    ("torch.backends.cuda.matmul.allow_tf32", lambda t: t.backends.cuda.matmul, "allow_tf32"),
    ("torch.backends.cudnn.allow_tf32", lambda t: t.backends.cudnn, "allow_tf32"),
    (
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
        lambda t: t.backends.cuda.matmul,
        "allow_fp16_reduced_precision_reduction",
    ),
    (
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
        lambda t: t.backends.cuda.matmul,
        "allow_bf16_reduced_precision_reduction",
    ),
)


class MathFlags:
    """torch's reduced-precision switches as they were before the candidate was imported."""

    def __init__(self):
        import torch

        self.torch = torch
        self.before = self.read()

    def read(self) -> dict:
        values = {}
        for name, owner, attr in FLAGS:
            with contextlib.suppress(Exception):
                values[name] = getattr(owner(self.torch), attr)
        return values

    def changed(self) -> dict:
        now = self.read()
        return {k: now[k] for k in now if now[k] != self.before.get(k)}

    @contextlib.contextmanager
    def pinned(self):
        """Run the reference with the switches as they were; put the candidate's back after."""
        now = self.read()
        self._write(self.before)
        try:
            yield
        finally:
            self._write(now)

    def restore(self) -> None:
        """Put the switches back for the next job in this worker."""
        self._write(self.before)

    def _write(self, values: dict) -> None:
        for name, owner, attr in FLAGS:
            if name in values:
                with contextlib.suppress(Exception):
                    setattr(owner(self.torch), attr, values[name])

    def finding(self, execution: str | None) -> Finding | None:
        """What the candidate switched on; on the CPU that math is not emulated, so say what was not checked."""
        changed = self.changed()
        if not changed:
            return None
        on_cpu = execution in ("cpu", "triton-interpreter")
        return Finding(
            code="precision_not_emulated" if on_cpu else "reduced_precision_math",
            severity="warning" if on_cpu else "info",
            evidence={"switched": changed},
            message=f"the candidate changed torch's precision switches ({', '.join(changed)}); "
            + (
                "the CPU computes those ops in full fp32, so their reduced-precision error was not checked "
                "here: the GPU verdict may differ"
                if on_cpu
                else "the reference ran with them as they were"
            ),
        )
