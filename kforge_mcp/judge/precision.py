"""The precision a verify is judged at, inside a worker: the request's ``precision`` and
tolerances, else the problem's ``PRECISION``, ``ATOL`` and ``RTOL``, else the dtypes of its
outputs (KernelBench's defaults, options.py). With a precision, floating inputs and both models
are cast to its dtype before they run.

The reference that judges is the truth: torch's switches for reduced-precision math (TF32 in cuBLAS
and cuDNN, which torch turns on for convolutions by default, and fp16/bf16 GEMMs that reduce in their
own format) are off while it runs, at every precision ('tf32' loosens the tolerance). So an exact
fp32 kernel is not failed by a reference that ran its convolution in TF32, and a candidate that turns
TF32 on cannot move the reference's outputs towards its own. The baselines are timed at the switches
as the process had them before the candidate (torch's defaults, as users run them)."""

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


# torch's switches for reduced-precision math in fp32 (and fp16/bf16) ops, as users set them, under
# torch.backends. torch >= 2.9 has a per-backend ``fp32_precision`` ("ieee", "tf32", "bf16" or "none": inherit
# from the parent); older torch only ``allow_tf32``. Reading the legacy flags fails once a program mixed the two
# APIs, so where the new one exists only it is read and written. Keyed by the device kinds whose ops they move.
LEAVES = {
    "cuda": ("cuda.matmul.fp32_precision", "cudnn.conv.fp32_precision", "cudnn.rnn.fp32_precision"),
    "cpu": ("mkldnn.matmul.fp32_precision", "mkldnn.conv.fp32_precision", "mkldnn.rnn.fp32_precision"),
}
LEAVES["xpu"] = LEAVES["cpu"]  # oneDNN serves both
PARENTS = ("fp32_precision", "cudnn.fp32_precision", "mkldnn.fp32_precision")
LEGACY_TF32 = ("cuda.matmul.allow_tf32", "cudnn.allow_tf32")
REDUCTIONS = (  # fp16/bf16 GEMMs that may reduce in their own format: off for a reference that is the truth
    "cuda.matmul.allow_fp16_reduced_precision_reduction",
    "cuda.matmul.allow_bf16_reduced_precision_reduction",
)
# what the conv switches default to when every level says "none" (torch's default for cuDNN is TF32)
CONV_DEFAULT = "tf32"
MATMUL_PRECISION = {"highest": "ieee", "high": "tf32", "medium": "bf16"}


def _backend(torch, path: str):
    owner = torch.backends
    *head, last = path.split(".")
    for part in head:
        owner = getattr(owner, part)
    return owner, last


class MathFlags:
    """torch's reduced-precision switches: as the process had them before the candidate was imported (the
    defaults as the problem leaves them: what users run, and what the baselines are timed at), and the math the
    reference is judged at: the truth, TF32 and reduced-precision reductions off in every backend, whatever the
    precision. A 'tf32' request loosens the tolerance, it does not round the reference: one run at TF32 sits a TF32
    error from the truth, and on an H100 exact and 3xTF32 kernels failed against it by that error (2.7e-2 at 5e-3,
    a 128x512x192 matmul) where they pass against the truth, as on the CPU."""

    def __init__(self, device: str = "cpu"):
        import torch

        self.torch = torch
        self.kind = device.split(":")[0]
        self.new_api = hasattr(torch.backends, "fp32_precision")
        self.names = (
            [n for leaves in LEAVES.values() for n in leaves] + list(PARENTS) if self.new_api else list(LEGACY_TF32)
        )
        self.names = list(dict.fromkeys(self.names)) + list(REDUCTIONS)
        self.before = self.read()
        self.judging = self.exact()

    def exact(self) -> dict:
        values: dict = {n: False for n in REDUCTIONS}
        if not self.new_api:
            return values | {n: False for n in LEGACY_TF32}
        return values | {leaf: "ieee" for leaves in LEAVES.values() for leaf in leaves}

    def read(self) -> dict:
        values = {}
        for name in self.names:
            with contextlib.suppress(Exception):
                owner, attr = _backend(self.torch, name)
                values[name] = getattr(owner, attr)
        return values

    def changed(self) -> dict:
        now = self.read()
        return {k: now[k] for k in now if now[k] != self.before.get(k)}

    @contextlib.contextmanager
    def _with(self, values: dict):
        now = self.read()
        self._write(values)
        try:
            yield
        finally:
            self._write(now)

    def judged(self):
        """Run the reference at the math that judges it; the switches as they were after."""
        return self._with(self.judging)

    def defaults(self):
        """Run at the switches as they were before the candidate: what users get, what baselines are timed at."""
        return self._with(self.before)

    def restore(self) -> None:
        """Put the switches back for the next job in this worker."""
        self._write(self.before)

    def _write(self, values: dict) -> None:
        for name, value in values.items():
            with contextlib.suppress(Exception):
                owner, attr = _backend(self.torch, name)
                setattr(owner, attr, value)

    def effective(self, values: dict) -> dict[str, str]:
        """What matmul, conv and RNN ops of this device do under ``values``: 'ieee', 'tf32' or 'bf16'."""
        if not self.new_api:
            tf32 = {n.split(".")[-2]: values.get(n) for n in LEGACY_TF32}
            return {"matmul": "tf32" if tf32.get("matmul") else "ieee", "conv": "tf32" if tf32.get("cudnn") else "ieee"}
        leaves = LEAVES.get(self.kind, LEAVES["cpu"])
        out = {}
        for leaf in leaves:
            op = leaf.split(".")[-2]
            parent = f"{leaf.split('.')[0]}.fp32_precision"
            chain = [values.get(leaf), values.get(parent), values.get("fp32_precision")]
            value = next((v for v in chain if v not in (None, "none")), None)
            if value is None:
                matmul = MATMUL_PRECISION.get(self.torch.get_float32_matmul_precision(), "ieee")
                value = matmul if op == "matmul" else CONV_DEFAULT if self.kind == "cuda" else "ieee"
            out[op] = value
        return out

    def describe(self, values: dict) -> str:
        """'matmul ieee, conv tf32, rnn tf32' (the fp16/bf16 reductions named when they reduce in fp32)."""
        ops = ", ".join(f"{op} {v}" for op, v in self.effective(values).items())
        if self.kind == "cuda" and not any(values.get(n) for n in REDUCTIONS):
            ops += ", fp16/bf16 GEMMs reduce in fp32"
        return ops

    @property
    def defaults_differ(self) -> bool:
        """Whether torch's defaults here would run the reference at other math than the judge's."""
        return self.effective(self.before) != self.effective(self.judging)

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
                else "the reference ran at the math that judges it, the baselines at torch's defaults"
            ),
        )
