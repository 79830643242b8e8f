"""Compute paths: the ways to do a problem's products (its own dtype, a lower format on tensor cores, or a
split of fp32 into several lower-format products), each with its rate on a device and whether it can meet the
tolerance: measured on the problem's inputs (precision_paths.py) or judged by its operands' rounding."""

from __future__ import annotations

from kforge_mcp.core.options import default_tolerance
from kforge_mcp.core.schemas import ComputePath
from kforge_mcp.judge.precision_paths import MARGIN, PATH_SPECS, PATHS_FOR, MeasuredPaths
from kforge_mcp.platforms.base import Peaks

# Unit roundoff of each path's operands, for a bound without a problem to measure (precision_paths.py
# measures the paths on the problem's own inputs when there is one): a path can meet a tolerance tol when
# 2u <= tol (the generous side: a bound must never be slower than a kernel that passes). 3xTF32 and bf16x6
# keep about fp32 accuracy (3xTF32: max error ~6e-7 at K=8192).
UNIT_ROUNDOFF = {
    "fp64": 2.0**-53,
    "fp32": 2.0**-24,
    "bf16x6": 2.0**-24,
    "3xtf32": 2.0**-22,
    "tf32": 2.0**-11,
    "fp16": 2.0**-11,
    "bf16": 2.0**-8,
    "fp8": 2.0**-4,
}
# Splits whose error rounding cannot vouch for: bf16x3 keeps ~16 bits and drops lo*lo, and bf16x2 / fp16x2
# leave one operand rounded once; whether they pass depends on K, the tail and the inputs. Only a
# measurement on the problem makes them feasible.
MEASURED_ONLY = ("bf16x3", "bf16x2", "fp16x2")
# Paths open to each problem dtype: converting down is allowed when the tolerance allows it.
TORCH_DTYPE = {"fp64": "float64", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def path_tolerance(dtype: str, atol: float | None, rtol: float | None) -> float:
    """The tolerance a compute path must meet: the looser of atol and rtol, else verify's default for the dtype."""
    return max(t for t in (atol, rtol, 0.0) if t is not None) or default_tolerance(TORCH_DTYPE.get(dtype, dtype))


def path_peak(peaks: Peaks, path: str) -> float | None:
    """A path's rate: its format's peak over its products per step. A split is offered only where it beats
    the FMA pipe (a device without tensor cores for the format gains nothing by splitting)."""
    spec = PATH_SPECS.get(path)
    if spec is None:
        return peaks.flops.get(path)
    base = peaks.flops.get(spec.base)
    if not base:
        return None
    rate = base / len(spec.terms)
    return rate if len(spec.terms) == 1 or rate > peaks.flops.get("fp32", 0) else None


def compute_paths(
    peaks: Peaks, dtype: str, atol: float | None, rtol: float | None, measured: MeasuredPaths | None = None
) -> list[ComputePath]:
    """Every path open to the dtype on this device, each marked feasible or not for the tolerance: from its
    max error measured on the problem's inputs when ``measured`` has it, else from its operands' rounding."""
    tol = path_tolerance(dtype, atol, rtol)
    margin = measured.margin if measured is not None else MARGIN
    out = []
    for path in PATHS_FOR.get(dtype, (dtype,)):
        peak = path_peak(peaks, path)
        if not peak:
            continue
        spec = PATH_SPECS.get(path)
        terms = len(spec.terms) if spec else 1
        u = UNIT_ROUNDOFF.get(path, 0.0)
        seen = measured is not None and path in measured.errors
        err = measured.errors.get(path) if measured is not None else None
        said = (
            f"max error {err:.2g} of the tolerance on this problem's inputs"
            if err is not None
            else "not finite on this problem's inputs (overflow or NaN)"
        )
        if path == dtype:
            ok, why = True, f"the problem's own dtype ({dtype})" + (f"; {said}" if seen else "")
        elif seen:
            ok = err is not None and err <= margin
            why = said + (f" (within the margin {margin:g})" if ok else f" (over the margin {margin:g})")
        elif path in MEASURED_ONLY:
            ok, why = False, "its error depends on the problem: feasible only when measured on its inputs"
        elif 2 * u <= tol:
            ok, why = True, f"operand rounding ~{u:.1e} (2u = {2 * u:.1e}) fits the tolerance {tol:g}"
        else:
            ok, why = False, f"operand rounding ~{u:.1e} (2u = {2 * u:.1e}) exceeds the tolerance {tol:g}"
        if measured is not None and path in measured.unmeasured:
            why = f"{measured.unmeasured[path]}; {why}"
        if terms > 1 and spec:
            why += f"; {spec.how} ({terms} {spec.base} MMAs per step)"
        out.append(ComputePath(path=path, peak_flops=peak, feasible=ok, why=why, terms=terms, max_error=err))
    return out


def fastest(paths: list[ComputePath], cost=None) -> ComputePath | None:
    """The fastest path; within 1% of it (bf16x6 and 3xTF32 on Hopper), the one with fewer products. ``cost``: a
    path's time where it is not the FLOPs over its peak (a convolution's MMA padding differs by path)."""
    if not paths:
        return None
    cost = cost or (lambda p: 1.0 / p.peak_flops)
    top = min(cost(p) for p in paths)
    return min((p for p in paths if cost(p) * 0.99 <= top), key=lambda p: (p.terms, cost(p)))


def path_choice(
    paths: list[ComputePath], best: ComputePath, tol: float, measured: bool, unmeasured: dict[str, str] | None = None
) -> str:
    """Why the bound takes ``best``: its measured error (or rounding), its rate against the next passing path,
    the faster paths that miss the tolerance, and those ``unmeasured`` (path -> why) that rounding judged."""
    reason = f"{best.path} at {best.peak_flops / 1e12:.4g} TFLOP/s: the fastest path that meets the tolerance {tol:g}"
    if measured and best.max_error is not None:
        reason = f"{best.path}: max error {best.max_error:.2g} of the tolerance {tol:g} on this problem's inputs"
    slower = [p for p in paths if p.feasible and p.peak_flops < best.peak_flops]
    if slower:
        nxt = fastest(slower) or best
        ratio = best.peak_flops / nxt.peak_flops
        rate = "twice" if abs(ratio - 2) < 0.05 else f"{ratio:.3g}x"
        reason += f", {rate} {nxt.path}'s rate ({best.peak_flops / 1e12:.4g} TFLOP/s)"
    unmeasured = unmeasured or {}
    faster = sorted((p for p in paths if not p.feasible), key=lambda p: -p.peak_flops)
    not_measured = [p.path for p in faster if p.path in unmeasured]
    faster = [p for p in faster if p.path not in unmeasured]
    if not_measured:
        reason += f"; {', '.join(not_measured)} {unmeasured[not_measured[0]]}, judged by rounding"
    if faster and measured:
        miss = ", ".join(
            f"{p.path} {p.max_error:.2g}" if p.max_error is not None else f"{p.path} not finite" for p in faster
        )
        reason += f"; faster paths miss the margin {MARGIN:g} (max error: {miss})"
    elif faster:
        coarse = [p.path for p in faster if p.path not in MEASURED_ONLY]
        to_measure = [p.path for p in faster if p.path in MEASURED_ONLY]
        said = [f"{', '.join(coarse)} round too coarsely for it"] if coarse else []
        said += [f"{', '.join(to_measure)} need a measurement on the problem's inputs"] if to_measure else []
        reason += f" ({'; '.join(said)}; see paths)"
    return reason


def dtype_bytes(dtype: str) -> int:
    """Bytes of one element of a problem dtype as the roofline names it (fp32, bf16, ...); 4 for one it does not."""
    return {"fp8": 1, "fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8}.get(dtype, 4)


def dtype_key(dtype) -> str:
    s = str(dtype).replace("torch.", "")
    return {
        "float32": "fp32",
        "float": "fp32",
        "float16": "fp16",
        "half": "fp16",
        "bfloat16": "bf16",
        "float64": "fp64",
        "double": "fp64",
    }.get(s, "fp8" if "float8" in s else "fp32")
