"""The bound of a forward, T_SOL = max(compute FLOPs / the path's peak, minimum bytes / peak bandwidth), and a
measured time set against it (corrected, never over 1, when a kernel beats it)."""

from __future__ import annotations

from kforge_mcp.core.schemas import ComputePath, Convolution, Lever, Roofline
from kforge_mcp.judge.precision_paths import MeasuredPaths
from kforge_mcp.judge.roofline.conv import compute_flops, conv_gemm, conv_shape, mma_granules, problem_kind
from kforge_mcp.judge.roofline.counting import count_problem
from kforge_mcp.judge.roofline.paths import compute_paths, fastest, path_choice, path_tolerance
from kforge_mcp.platforms import lookup_peaks

PLACEHOLDER = "placeholder"  # the source of peaks no device was measured for (the CPU's peaks.toml)
PLACEHOLDER_NOTE = "placeholder CPU peaks, not a measured device: a rough guide only"


def output_floor(r: Roofline) -> bool:
    """A memory bound set mostly by the output write (e.g. a transposed convolution's upsampled output)."""
    return r.bound == "memory" and bool(r.out_bytes) and (r.out_bytes or 0.0) >= 0.5 * r.bytes


def bound_text(r: Roofline) -> str:
    """What sets the bound, in the roofline's own figures."""
    tb = r.peak_bandwidth / 1e12
    if r.bound == "memory" and output_floor(r):
        head = (
            f"memory-bound: the floor is the {(r.out_bytes or 0.0) / 1e6:.3g} MB output write "
            f"({(r.out_bytes or 0.0) / r.bytes:.0%} of the {r.bytes / 1e6:.3g} MB minimum, {r.byte_ms:.4g} ms at "
            f"{tb:.3g} TB/s)"
        )
    elif r.bound == "memory":
        head = (
            f"memory-bound: {r.bytes / 1e6:.4g} MB minimum (inputs and weights read once, outputs written once), "
            f"{r.byte_ms:.4g} ms at {tb:.3g} TB/s"
        )
    else:
        head = (
            f"compute-bound: {r.compute_flops or r.flops:.4g} FLOPs on the {r.path} path at "
            f"{r.peak_flops / 1e12:.4g} TFLOP/s, {r.flop_ms:.4g} ms"
        )
    if r.flops == 0:  # no products: bytes alone bound it, and no compute path applies
        other = "; no matrix products or convolutions, so no compute term"
    elif r.bound == "memory":
        other = f"; compute {r.flop_ms:.4g} ms on the {r.path} path"
    else:
        other = f"; memory {r.byte_ms:.4g} ms for {r.bytes / 1e6:.4g} MB"
    for c in r.convs:
        pad = c.padded_flops / c.flops if c.flops else 1.0
        other += f"; {conv_shape(c)}, {c.flops:.4g} FLOPs" + (
            f" padded to {c.padded_flops:.4g} (x{pad:.3g}) for the MMA's K and N" if pad > 1.0 + 1e-9 else ""
        )
    if placeholder_peaks(r):
        other += f"; {PLACEHOLDER_NOTE}"
    return head + other


def no_path(flops: float, dtype: str, device: str) -> str:
    """Why a roofline has no compute path: nothing to compute on one, or none in the device's table."""
    if flops == 0:
        return "none: no matrix products or convolutions, so the bound is the bytes moved"
    return f"{dtype}: no path in the {device} table"


def placeholder_peaks(r: Roofline) -> bool:
    """Whether ``r``'s bound, and so any fraction of it, comes from the table's placeholder figures."""
    return r.peaks_source == PLACEHOLDER


def _padding_loss(feasible: list[ComputePath], best: ComputePath | None, flops: float, convs, peaks) -> str:
    """Why the path of the highest peak is not the fastest: the convolutions' MMA padding on it ('' when it is)."""
    by_peak = fastest(feasible)
    if not best or not by_peak or by_peak.path == best.path:
        return ""
    return (
        f"; {by_peak.path}'s higher peak loses to the convolutions' MMA padding on it "
        f"({compute_flops(flops, convs, *mma_granules(peaks, by_peak.path)):.4g} FLOPs there)"
    )


def _counted(measured: MeasuredPaths | None, convs, flops_by_op, special_functions, logs_by_op) -> tuple:
    """The counts the caller left out (None), from the measurement's."""
    if measured is None:
        return convs or [], flops_by_op, special_functions, logs_by_op
    return (
        measured.convs if convs is None else convs,
        measured.flops_by_op if flops_by_op is None else flops_by_op,
        measured.special_functions if special_functions is None else special_functions,
        measured.logs_by_op if logs_by_op is None else logs_by_op,
    )


def make_roofline(
    flops: float,
    nbytes: float,
    dtype: str = "fp32",
    device_name: str | None = None,
    measured_ms: float | None = None,
    peak_flops: float | None = None,
    peak_bandwidth: float | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    measured: MeasuredPaths | None = None,
    out_bytes: float | None = None,
    convs: list[Convolution] | None = None,
    flops_by_op: dict[str, float] | None = None,
    special_functions: float | None = None,
    logs_by_op: dict[str, float] | None = None,
) -> Roofline:
    """``measured``: the paths' errors on the problem's own inputs (precision_paths.py); without it each path
    is judged by its operands' rounding. ``convs``: the reference's convolutions, whose implicit GEMMs a
    tensor-core path pads to its MMA shapes (their FLOPs are part of ``flops``)."""
    peaks, note = lookup_peaks(device_name)
    notes = ([note] if note else []) + (measured.notes if measured is not None else [])
    convs, flops_by_op, special_functions, logs_by_op = _counted(
        measured, convs, flops_by_op, special_functions, logs_by_op
    )
    # no products or convolutions: no compute path (tensor-core format, MMA padding) has anything to do
    paths = compute_paths(peaks, dtype, atol, rtol, measured) if flops > 0 else []
    feasible = [p for p in paths if p.feasible] or paths

    def cost(p: ComputePath) -> float:  # a path's compute time per peak FLOP/s: its padding differs by path
        return compute_flops(flops, convs, *mma_granules(peaks, p.path)) / p.peak_flops

    best = fastest(feasible, cost)
    path = best.path if best else dtype
    pf = peak_flops or (best.peak_flops if best else peaks.flops["fp32"])  # every table entry has fp32
    bw = peak_bandwidth or peaks.bandwidth
    if peak_flops or peak_bandwidth:
        notes.append("peaks overridden by the caller")
    if peaks.note:
        notes.append(f"{peaks.name}: {peaks.note}")
    tol = path_tolerance(dtype, atol, rtol)
    measured_any = measured is not None and bool(measured.errors)
    left = measured.unmeasured if measured is not None else None
    reason = path_choice(paths, best, tol, measured_any, left) if best else no_path(flops, dtype, peaks.name)
    reason += _padding_loss(feasible, best, flops, convs, peaks)
    granules = mma_granules(peaks, path)
    paid = compute_flops(flops, convs, *granules)
    flop_ms, byte_ms = paid / pf * 1e3, nbytes / bw * 1e3
    sol = max(flop_ms, byte_ms)
    r = Roofline(
        flops=flops,
        bytes=nbytes,
        out_bytes=out_bytes if out_bytes is not None else (measured.out_bytes if measured is not None else None),
        dtype=dtype,
        path=path,
        path_reason=reason,
        paths=paths,
        paths_measured=measured_any,
        atol=atol,
        rtol=rtol,
        device=peaks.name,
        peaks_source=peaks.source,
        peak_flops=pf,
        peak_bandwidth=bw,
        sol_ms=sol,
        flop_ms=flop_ms,
        byte_ms=byte_ms,
        bound="compute" if flop_ms > byte_ms else "memory",
        kind=problem_kind(flops_by_op or {}, convs),
        flops_by_op=flops_by_op or {},
        special_functions=special_functions or 0.0,
        logs_by_op=logs_by_op or {},
        convs=[conv_gemm(c, *granules) for c in convs],
        compute_flops=paid,
        notes=notes,
    )
    r.bound_reason = bound_text(r)
    if flops == 0:
        r.notes.append("FlopCounterMode counted 0 FLOPs (it counts matmul/conv/attention only): the bound is memory")
    return with_measured(r, measured_ms)


def from_measured(
    m: MeasuredPaths,
    device_name: str | None,
    measured_ms: float | None = None,
    peak_flops: float | None = None,
    peak_bandwidth: float | None = None,
) -> Roofline:
    """The roofline of a problem whose paths were measured, for one device and time (structure.measured_roofline
    adds the levers read in the same worker)."""
    return make_roofline(
        m.flops, m.bytes, m.dtype, device_name, measured_ms, peak_flops, peak_bandwidth, m.atol, m.rtol, m
    )


def lever_sol_ms(r: Roofline, flops_after: float, bytes_after: float) -> float:
    """T_SOL of the forward after a lever, on ``r``'s path and peaks: its compute term scales with the FLOPs left
    (a convolution's padding stays in proportion)."""
    compute = r.flop_ms * flops_after / r.flops if r.flops > 0 else 0.0
    return max(compute, bytes_after / r.peak_bandwidth * 1e3)


def with_lever(r: Roofline, lever: Lever, why: str) -> Roofline:
    """The bound of the forward after a lever the kernel takes: the lever's FLOPs and bytes on ``r``'s path and
    peaks (the convolutions' FLOPs scaled with the rest), said so in the notes; the measured time set again."""
    scale = lever.flops_after / r.flops if r.flops > 0 else 1.0
    flop_ms = r.flop_ms * scale
    byte_ms = lever.bytes_after / r.peak_bandwidth * 1e3
    out = r.model_copy(
        update=dict(
            flops=lever.flops_after,
            bytes=lever.bytes_after,
            flop_ms=flop_ms,
            byte_ms=byte_ms,
            sol_ms=lever.sol_ms_after,
            bound="compute" if flop_ms >= byte_ms else "memory",
            bound_reason=f"after '{lever.title}': {lever.flops_after:.4g} FLOPs, {lever.bytes_after:.4g} bytes",
            flops_by_op={op: f * scale for op, f in r.flops_by_op.items()},
            convs=[
                c.model_copy(update=dict(flops=c.flops * scale, padded_flops=c.padded_flops * scale)) for c in r.convs
            ],
            compute_flops=None if r.compute_flops is None else r.compute_flops * scale,
            levers=[lv for lv in r.levers if lv is not lever],
            notes=[
                *r.notes,
                f"the kernel takes the lever '{lever.title}' ({why}): bound taken as the lever's "
                f"{lever.sol_ms_after:.4g} ms",
            ],
        )
    )
    return with_measured(out, r.measured_ms)


def corrected_bound(r: Roofline, measured_ms: float) -> tuple[float, str]:
    """A time below the bound shows which assumption failed. The bound steps down to the next faster path (the
    kernel runs a path the model judged too coarse, or a faster one than it knew) or to a lever of the
    reference's structure the kernel takes (less work than the reference does), the tightest of them first;
    then to the memory floor (FLOPs free), and to the output write alone (inputs served from a cache). The first
    step at or under the measured time is the corrected bound."""
    steps = []
    peaks, _ = lookup_peaks(r.device)
    for p in sorted(r.paths, key=lambda p: -p.peak_flops):
        ms = compute_flops(r.flops, r.convs, *mma_granules(peaks, p.path)) / p.peak_flops * 1e3
        if ms < r.flop_ms:
            steps.append(
                (
                    max(ms, r.byte_ms),
                    (
                        f"the kernel's math is faster than the {r.path} path allows: bound taken on the {p.path} "
                        f"path ({p.peak_flops / 1e12:.4g} TFLOP/s; {p.why})"
                    ),
                )
            )
    for lv in r.levers:
        if lv.sol_ms_after < r.sol_ms:
            saves = f"{lv.flops_saved:.4g} FLOPs and {lv.bytes_saved:.4g} bytes fewer a forward"
            steps.append(
                (
                    lv.sol_ms_after,
                    f"the kernel takes the lever '{lv.title}': {saves}; bound taken as the lever's "
                    f"{lv.sol_ms_after:.4g} ms",
                )
            )
    last = [(r.byte_ms, "bound taken as the memory floor: the minimum bytes at peak bandwidth, FLOPs free")]
    if r.out_bytes:
        last.append(
            (
                r.out_bytes / r.peak_bandwidth * 1e3,
                "the inputs did not all come from DRAM: bound taken as the output write alone at peak bandwidth",
            )
        )
    for sol, why in sorted(steps, key=lambda x: -x[0]) + last:
        if sol <= measured_ms:
            return sol, why
    return measured_ms, (
        "faster than writing the output at peak bandwidth: the peaks or the byte count are wrong for this "
        "device (verify flags faster_than_light); fraction set to 1"
    )


def with_measured(r: Roofline, measured_ms: float | None) -> Roofline:
    """Attach a measured time. A time below the bound means the model is wrong: the bound is corrected
    (corrected_bound) and said so, and the fraction is taken against the corrected bound, never over 1."""
    r.measured_ms = measured_ms
    r.fraction_of_sol, r.below_bound, r.corrected_sol_ms, r.correction = None, False, None, None
    r.notes = [n for n in r.notes if not n.startswith("measured ")]
    if measured_ms and measured_ms > 0:
        if measured_ms >= r.sol_ms:
            r.fraction_of_sol = r.sol_ms / measured_ms
        else:
            sol, why = corrected_bound(r, measured_ms)
            r.below_bound, r.corrected_sol_ms, r.correction = True, sol, why
            r.fraction_of_sol = min(1.0, sol / measured_ms)
            r.notes.append(
                f"measured {measured_ms:.4g} ms is below the bound {r.sol_ms:.4g} ms on the {r.path} path: the "
                f"model is wrong for this kernel; {why} ({sol:.4g} ms)"
            )
    return r


def set_verify_bound(report, roof: Roofline, candidate_ms: float) -> None:
    """A verify report's bound (sol_ms, fraction_of_sol, sol_path, compute_paths) from a roofline with the
    candidate's time, and the finding that says so when the candidate beat the model."""
    from kforge_mcp.core.schemas import Finding

    report.sol_ms = roof.corrected_sol_ms if roof.below_bound else roof.sol_ms
    report.fraction_of_sol = roof.fraction_of_sol
    report.sol_path = (
        f"{roof.path} ({roof.bound}-bound on {roof.device}): {roof.path_reason}"
        + (f"; {roof.kind}: {roof.bound_reason}" if roof.convs else "")
        + (f"; corrected: {roof.correction}" if roof.below_bound else "")
    )
    report.compute_paths = roof.paths
    report.findings = [f for f in report.findings if f.code != "below_speed_of_light_model"]
    if roof.below_bound:
        report.findings.append(
            Finding(
                code="below_speed_of_light_model",
                severity="info",
                evidence={
                    "candidate_ms": candidate_ms,
                    "model_sol_ms": roof.sol_ms,
                    "path": roof.path,
                    "corrected_sol_ms": roof.corrected_sol_ms,
                },
                message=roof.notes[-1],
            )
        )


def reference_roofline(
    problem,
    device: str,
    device_name: str | None,
    measured_ms: float | None = None,
    peaks: dict | None = None,
    atol: float | None = None,
    rtol: float | None = None,
) -> Roofline:
    """The reference's roofline, its paths judged by their rounding (the server measures them: precision_paths)."""
    peaks = peaks or {}
    c = count_problem(problem, device)
    return make_roofline(
        c.flops,
        c.bytes,
        c.dtype,
        device_name,
        measured_ms,
        peaks.get("flops"),
        peaks.get("bandwidth"),
        atol,
        rtol,
        out_bytes=c.out_bytes,
        convs=list(c.convs),
        flops_by_op=c.flops_by_op,
        special_functions=c.special_functions,
        logs_by_op=c.logs_by_op,
    )
