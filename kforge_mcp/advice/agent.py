"""The performance-analysis agent: rules over a normalized profile, ranked by expected gain,
with a plain summary. An LLM narrative can be added (``configure_narrator``); it is off unless
configured and never replaces the evidence. Screenshots of GUI profilers need an LLM that reads
images (``configure_image_reader``); without one the agent says so instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.rules import RULES, Rule, run_rules
from kforge_mcp.advice.rules.base import busiest_unit
from kforge_mcp.advice.rules.launch import LAUNCH
from kforge_mcp.profiling.report import AnalysisReport, ProfileReport, Recommendation, RuleNotRun

Narrator = Callable[[ProfileReport, list[Recommendation]], str]
ImageReader = Callable[[bytes, str], AnalysisReport]
_narrator: Narrator | None = None
_image_reader: ImageReader | None = None
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp")


def configure_narrator(fn: Narrator | None) -> None:
    global _narrator
    _narrator = fn


def configure_image_reader(fn: ImageReader | None) -> None:
    global _image_reader
    _image_reader = fn


def without_a_gpu(report: ProfileReport, not_run: Sequence[RuleNotRun]) -> str:
    """What a profile with no device kernels can and cannot be advised on."""
    gpu_only = [n.rule for n in not_run if "a GPU run" in n.reason or "Nsight Compute" in n.reason]
    parts = [
        f"{report.source} profile with no device kernels (CPU ops only): the advice that needs a GPU run (kernel "
        "times, pipe, stall and memory metrics) is not given"
        + (f" ({', '.join(gpu_only)}; rules_not_run says what each needs)." if gpu_only else ".")
    ]
    c = report.compiled
    if c is not None and c.kernels:
        mma = sorted({k.mma or "unknown" for k in c.kernels})
        parts.append(
            f"Advice below comes from the candidate compiled for {c.arch} ({len({k.name for k in c.kernels})} "
            f"kernel(s); MMA instructions: {', '.join(mma)}), the reference's structure and the roofline."
        )
    r = report.roofline
    if r is None or not vocabulary.has_tensor_units(r.device):
        parts.append(
            "Name a device model (profile --device-model h100) for its roofline: the bound, the compute path the "
            "tolerance allows and the tensor-core advice it prices."
        )
    return " ".join(parts)


def summarize(
    report: ProfileReport,
    recs: list[Recommendation],
    no_gain: Sequence[Recommendation] = (),
    not_run: Sequence[RuleNotRun] = (),
) -> str:
    dev = report.device_kernels()
    parts = []
    where = report.device_name or report.device or "an unknown device"
    if dev:
        per = f", {report.launches_per_forward:g} launches per forward" if report.launches_per_forward else ""
        ms = (
            f", {report.device_ms_per_forward * 1e3:.2f} us device time per forward"
            if report.device_ms_per_forward
            else ""
        )
        parts.append(f"{report.source} profile on {where}: {len(dev)} kernel(s){per}{ms}.")
    else:
        parts.append(without_a_gpu(report, not_run))
    r = report.roofline
    if r is not None:
        if r.below_bound:
            frac = (
                f", measured below it: the model is wrong for this kernel, {r.correction} "
                f"({(r.corrected_sol_ms or 0.0) * 1e3:.2f} us; {r.fraction_of_sol or 0.0:.0%} of it)"
            )
        else:
            frac = f", {r.fraction_of_sol:.0%} of speed of light" if r.fraction_of_sol is not None else ""
        parts.append(
            f"Roofline ({r.device}, {r.dtype} problem, bound on the {r.path} path): {r.bound}-bound, "
            f"T_SOL {r.sol_ms * 1e3:.2f} us{frac}."
        )
        if r.convs:
            parts.append(f"Bound ({r.kind}): {r.bound_reason}.")
        if r.paths_measured:
            parts.append(f"Compute path: {r.path_reason}.")
    stopped = bool(recs and recs[0].stop)
    if stopped:
        parts.append(f"{recs[0].title}: the time is in kernels at their limit; further rounds are unlikely to pay off.")
        recs = recs[1:]
    if recs:
        top = recs[0]
        parts.append(
            f"{'If you go on' if stopped else 'Top recommendation'}: "
            f"{top.title} (expected to save ~{top.expected_gain:.0%} of device time; {top.priority} priority)."
        )
        if len(recs) > 1:
            parts.append("Then: " + "; ".join(f"{x.title} (~{x.expected_gain:.0%})" for x in recs[1:4]) + ".")
    elif dev and not stopped and not no_gain:
        parts.append("No rule fired: " + quiet_reason(report))
    if no_gain:
        parts.append(
            ("Priced at no gain" if recs or stopped else "No advice expects a gain here")
            + ": "
            + "; ".join(x.title for x in no_gain[:3])
            + " (set apart in no_gain)."
        )
    return " ".join(parts)


def quiet_reason(report: ProfileReport) -> str:
    """Why nothing fired, in the profile's own numbers: what it measured and what it lacked."""
    ks = sorted(report.device_kernels(), key=lambda k: -k.device_ms)
    if not ks:
        return "no device kernels."
    k = ks[0]
    if k.mean_ms < LAUNCH.min_kernel_ms:
        return (
            f"the longest kernel ({k.name[:60]}) takes {k.mean_ms * 1e3:.1f} us a launch: at that size launch "
            "latency, ramp-up and tail dominate, and its utilisation says little; profile a larger shape."
        )
    unit, busy = busiest_unit(k, vocabulary.of(report))
    if not unit and k.issue_active_pct is None:
        return (
            f"the profile has launch shapes and times only ({report.source}); run profile with depth='metrics' "
            "(Nsight Compute) for pipe, memory and stall metrics."
        )
    return (
        f"the longest kernel ({k.name[:60]}) has its busiest unit ({unit or 'none measured'}) at {busy:.0f}% and "
        "no pattern the rules know (coalescing, bank conflicts, spills, atomics, launch shape) stands out."
    )


def analyze(report: ProfileReport, rules: Sequence[Rule[Any]] = RULES) -> AnalysisReport:
    recs, no_gain, notes, not_run = run_rules(report, rules)
    out = AnalysisReport(
        recommendations=recs,
        no_gain=no_gain,
        summary=summarize(report, recs, no_gain, not_run),
        source=report.source,
        file=report.file,
        roofline=report.roofline,
        rules_not_run=not_run,
        notes=list(report.notes) + notes,
        stop=bool(recs and recs[0].stop),
    )
    if _narrator is not None:
        try:
            out.narrative = _narrator(report, recs)
        except Exception as e:  # noqa: BLE001  (the narrative is optional; the evidence stands without it)
            out.notes.append(f"narrative failed: {type(e).__name__}: {e}")
    return out


def analyze_image(path: str | Path) -> AnalysisReport:
    p = Path(path).expanduser()
    if _image_reader is None:
        return AnalysisReport(
            summary=f"{p.name}: reading a screenshot of a GUI profiler needs an LLM that reads images, and none is "
            "configured (kforge_mcp.advice.agent.configure_image_reader). Export the profile instead "
            "(ncu --csv --page raw, a torch.profiler chrome trace, or a proton .hatchet) and pass its path.",
            file=str(p),
            notes=["no image reader configured: no recommendations were made from the image"],
        )
    return _image_reader(p.read_bytes(), p.name)
