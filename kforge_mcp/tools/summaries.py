"""The text a model reads of a tool's result: a compact summary (verdict, speedup, what judged it, the
findings, the first mismatch, the bound; for a profile its kernels by time and its roofline), never the
JSON again. Fields that are null or empty are left out; the structured content keeps every field."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel

from kforge_mcp.agents.results import LoopResult, SubmitResult
from kforge_mcp.core.schemas import (
    CompileReport,
    Diagnostic,
    Finding,
    JobAware,
    JobInfo,
    Mismatch,
    Roofline,
    TargetsReport,
    Timing,
    VerifyBatchReport,
    VerifyReport,
)
from kforge_mcp.profiling.report import AnalysisReport, KernelProfile, ProfileReport
from kforge_mcp.suite_report import BenchSummary

LINE = 300  # a message longer than this is cut in the text (never in the structured content)
TAIL = 1200  # an error's stderr or traceback: its end, where the error is
KERNELS = 8  # kernels listed by device time; the rest counted
Lines = list[str | None]  # a summary's lines; None: a line with nothing to say, left out
CUT = "\n… (cut here: the structured content holds the rest)"


def summary(result: BaseModel) -> str:
    """The text of ``result`` for a model: its summary, cut at the most its kind may take."""
    job = getattr(result, "job_id", None)
    if job and getattr(result, "status", None) == "running":
        return f"still running as job {job}: job_status / job_result (wait_s) follow it; job_cancel stops it"
    write, most = next(((w, m) for kind, w, m in SUMMARIES if isinstance(result, kind)), (field_lines, 3000))
    text = "\n".join(line for line in write(result) if line)
    return text if most is None or len(text) <= most else text[: most - len(CUT)] + CUT


def field_lines(result: BaseModel) -> Lines:
    """Any other result, field by field: text whole (a prompt reads as itself), a report it holds summarized,
    the rest as compact JSON; nulls, empty fields and a finished call's job fields left out."""
    lines: Lines = []
    for field, info in type(result).model_fields.items():
        name, value = info.serialization_alias or field, getattr(result, field)
        if value in (None, "", [], {}) or (isinstance(result, JobAware) and field in JobAware.model_fields):
            continue  # (a call still running is said above)
        written = next((w for kind, w, _ in SUMMARIES if isinstance(value, kind)), None)
        if written is not None:
            lines += written(value)
        elif isinstance(value, str) and "\n" in value:
            lines.append(f"{name}:\n{value}")
        else:
            shown = value.model_dump(mode="json", exclude_none=True) if isinstance(value, BaseModel) else value
            lines.append(f"{name}: {shown if isinstance(shown, (str, int, float)) else json.dumps(shown, default=str)}")
    return lines


def cut(text: str, at: int = LINE) -> str:
    text = " ".join(text.split()) if "\n" not in text.strip() else text.strip()
    return text if len(text) <= at else text[: at - 1] + "…"


def tail(text: str, at: int = TAIL) -> str:
    text = text.strip()
    return text if len(text) <= at else "…" + text[-(at - 1) :]


def error(text: str) -> str:
    """An error message whole up to a line's length; a stack or stderr by its end."""
    return tail(text) if "\n" in text.strip() else cut(text, 2 * LINE)


def num(x: float | None, unit: str = "") -> str:
    return "-" if x is None else f"{x:.4g}{unit}"


def pairs(**fields: object) -> str:
    """'a 1, b x' of the fields that are set."""
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in fields.items() if v not in (None, "", [], {}))


def prefixed(head: str, text: str) -> str | None:
    return head + text if text else None


def bullets(title: str, lines: Iterable[str], most: int = 8) -> Lines:
    lines = list(lines)
    if not lines:
        return []
    more = [f"- … {len(lines) - most} more"] if len(lines) > most else []
    return [f"{title}:", *(f"- {line}" for line in lines[:most]), *more]


def diagnostic(d: Diagnostic) -> str:
    where = ":".join(str(x) for x in (d.file or "<source>", d.line, d.column) if x is not None)
    return f"{where}: {d.severity}: {cut(d.message, 2 * LINE)}"


def finding(f: Finding) -> str:
    evidence = pairs(**{k: v for k, v in f.evidence.items() if isinstance(v, (int, float, str))})
    return f"[{f.severity}] {f.code}: {cut(f.message)}" + (f" ({cut(evidence, 160)})" if evidence else "")


def mismatch(m: Mismatch) -> str:
    at = f"first at {m.first_mismatch_index}" if m.first_mismatch_index else None
    got = f"expected {num(m.expected)}, got {num(m.got)}" if m.expected is not None or m.got is not None else None
    share = f"{m.mismatched_fraction:.2%} of elements" if m.mismatched_fraction is not None else None
    details = pairs(
        max_abs_error=num(m.max_abs_error) if m.max_abs_error is not None else None,
        max_rel_error=num(m.max_rel_error) if m.max_rel_error is not None else None,
    )
    return f"trial {m.trial}, output {m.output_index}: {cut(m.reason)}; " + "; ".join(
        x for x in (details, at, got, share) if x
    )


def timing(t: Timing | None) -> str | None:
    if t is None:
        return None
    parts = [
        f"{name} {s.median_ms:.4g} ms ±{s.spread:.0%}"
        for name, s in (("candidate", t.candidate), ("eager", t.eager), ("compiled", t.compiled))
        if s
    ]
    return "timing (median, spread): " + ", ".join(parts) if parts else None


def verify_lines(r: VerifyReport) -> Lines:
    speed = f"{r.speedup:.3g}x over {r.speedup_over}" if r.speedup is not None else None
    head = f"verdict: {r.verdict}" + (f", {speed}" if speed else "")
    judged = pairs(precision=r.precision, atol=r.atol, rtol=r.rtol, trials=r.trials, seed=r.seed)
    where = pairs(target=r.target, device=r.device, execution=r.execution, node=r.node)
    bound = None
    if r.sol_ms is not None:
        bound = f"speed of light: {num(r.sol_ms, ' ms')}" + (
            f", {r.fraction_of_sol:.1%} of it" if r.fraction_of_sol is not None else ""
        )
        bound += f" (path {cut(r.sol_path, 200)})" if r.sol_path else ""
    sets = [
        f"set {s.index}: {'correct' if s.correct else 'wrong' if s.correct is False else 'not reached'}"
        + (f", {s.speedup:.3g}x" if s.speedup is not None else "")
        for s in r.input_sets
    ]
    return [
        head,
        f"judged at {judged}" if judged else None,
        where,
        timing(r.timing),
        f"speedup geomean over the input sets {r.speedup_geomean:.3g}x" if r.speedup_geomean is not None else None,
        bound,
        *bullets("findings", map(finding, r.findings)),
        *bullets("mismatches", map(mismatch, r.mismatches), most=2),
        *bullets("errors", map(error, filter(None, r.errors)), most=3),
        *bullets("diagnostics", map(diagnostic, r.diagnostics), most=5),
        *bullets("input sets", sets),
    ]


def kernel(k: KernelProfile) -> str:
    each = f"{k.launches} launches, {k.device_ms:.4g} ms" + (f" ({k.mean_ms:.4g} ms each)" if k.launches > 1 else "")
    facts = pairs(
        grid=k.grid,
        block=k.block,
        registers=k.registers,
        shared_bytes=k.shared_bytes,
        spills=k.spills or None,
        occupancy=f"{k.achieved_occupancy_pct:.0f}%" if k.achieved_occupancy_pct is not None else None,
        sm_throughput=f"{k.sm_throughput_pct:.0f}%" if k.sm_throughput_pct is not None else None,
        dram_throughput=f"{k.dram_throughput_pct:.0f}%" if k.dram_throughput_pct is not None else None,
        category=k.category,
        path=k.compute_path,
        stalls=", ".join(f"{s.reason} {s.cycles_per_issue:.2g}" for s in k.top_stalls[:3]) or None,
    )
    return f"{cut(k.name, 100)}: {each}" + (f"; {facts}" if facts else "")


def roofline_lines(roof: Roofline | None) -> Lines:
    if roof is None:
        return []
    measured = f", measured {roof.measured_ms:.4g} ms" if roof.measured_ms is not None else ""
    share = f": {roof.fraction_of_sol:.1%} of the speed of light" if roof.fraction_of_sol is not None else ""
    levers = [f"{lv.title}: {cut(lv.action, 200)} (bound after it {lv.sol_ms_after:.4g} ms)" for lv in roof.levers]
    return [
        f"roofline on {roof.device}{' (a model)' if roof.modeled else ''}: {roof.flops:.4g} FLOPs, {roof.bytes:.4g} bytes, "
        f"bound {roof.sol_ms:.4g} ms{measured}{share}; {roof.bound}-bound"
        + (f" ({cut(roof.bound_reason, 160)})" if roof.bound_reason else ""),
        f"compute path {roof.path}" + (f": {cut(roof.path_reason, 200)}" if roof.path_reason else ""),
        f"correction: {cut(roof.correction)}" if roof.correction else None,
        *bullets("levers", levers, most=4),
    ]


def profile_lines(r: ProfileReport) -> Lines:
    kernels = sorted(r.kernels, key=lambda k: -k.device_ms)
    per_forward = pairs(
        device_ms=num(r.device_ms_per_forward) if r.device_ms_per_forward is not None else None,
        launches=num(r.launches_per_forward) if r.launches_per_forward is not None else None,
        host_overhead_ms=num(r.host_overhead_ms) if r.host_overhead_ms is not None else None,
    )
    return [
        f"profile ({r.source or 'no profiler'}): "
        + pairs(
            target=r.target, device=r.device, device_name=r.device_name, execution=r.execution, forwards=r.forwards
        ),
        prefixed("per forward: ", per_forward),
        *roofline_lines(r.roofline),
        *bullets(f"kernels by device time ({len(kernels)})", map(kernel, kernels), most=KERNELS),
        *bullets("ncu rules", [f"{n.kernel}: {n.rule}: {cut(n.description, 120)}" for n in r.ncu_rules], most=3),
        *bullets("notes", (cut(n) for n in r.notes), most=5),
        *bullets("errors", map(error, filter(None, r.errors)), most=3),
        "next: analyze_profile with this result as profile, for ranked advice",
    ]


def analysis_lines(r: AnalysisReport) -> Lines:
    recs = []
    for rec in r.recommendations:
        evidence = "; ".join(
            f"{e.metric} {e.value}" + (f" (good: {e.good})" if e.good else "") for e in rec.evidence[:3]
        )
        recs.append(
            f"[{rec.priority}] {rec.title}: expected gain {rec.expected_gain:.0%}"
            + (f" ({cut(rec.gain_basis, 100)})" if rec.gain_basis else "")
            + f"\n  action: {cut(rec.action, 360)}"
            + (f"\n  evidence: {cut(evidence, 200)}" if evidence else "")
        )
    return [
        f"summary: {cut(r.summary, 600)}" if r.summary else None,
        "stop: the kernels are at their limit" if r.stop else None,
        *bullets("recommendations, ranked", recs, most=6),
        *roofline_lines(r.roofline),
        f"narrative: {cut(r.narrative, 800)}" if r.narrative else None,
        *bullets("notes", (cut(n) for n in r.notes), most=4),
    ]


def compile_lines(r: CompileReport) -> Lines:
    state = "compiled" if r.ok else "failed"
    kernels = [
        f"{k.name}{f' [{k.config}]' if k.config else ''}: "
        + pairs(registers=k.registers, spills=k.spills, shared_bytes=k.shared_bytes)
        for k in r.kernels
    ]
    return [
        f"{state}: "
        + pairs(
            target=r.target,
            arch=r.arch,
            signatures=r.signature_source,
            cached=r.cached or None,
            seconds=f"{r.seconds:.2f}",
        ),
        *bullets("diagnostics", map(diagnostic, r.diagnostics), most=12),
        *bullets("kernels", kernels, most=12),
        f"PTX of {len(r.ptx)} kernels: in the structured content and the links" if r.ptx else None,
    ]


def batch_lines(r: VerifyBatchReport) -> Lines:
    s = r.summary
    best = (
        f"; best: item {s.best_index} at {s.best_speedup:.3g}x" if s.best_index is not None and s.best_speedup else ""
    )
    items = [
        f"{i}: {v.verdict}"
        + (f", {v.speedup:.3g}x" if v.speedup is not None else "")
        + (f"; {cut(v.errors[0], 160)}" if v.errors else f"; {mismatch(v.mismatches[0])}" if v.mismatches else "")
        for i, v in enumerate(r.reports)
    ]
    counts = ", ".join(f"{n} {v}" for v, n in s.verdicts.items())
    return [f"{s.total} verified in {s.seconds:.1f} s: {counts}{best}", *bullets("items", items, most=32)]


def targets_lines(r: TargetsReport) -> Lines:
    lines = [
        f"{t.name}: "
        + (f"available on {', '.join(t.devices)}" if t.available else f"not available: {t.reason}")
        + ("; compiles here" if t.can_compile and not t.available else "")
        for t in r.targets
    ]
    return [
        *lines,
        "host: " + pairs(**r.host),
        *(f"node {n.address}: {n.error or ', '.join(n.targets)}" for n in r.nodes),
    ]


def job_lines(r: JobInfo) -> Lines:
    return [
        f"job {r.job_id} ({r.tool}): {r.status} after {r.seconds:.1f} s",
        f"progress: {r.progress}" if r.progress else None,
        f"error: {tail(r.error)}" if r.error else None,
    ]


def loop_lines(r: LoopResult) -> Lines:
    attempts = [
        f"{a.index} {a.pass_}: {a.verdict or '-'}" + (f", {a.speedup:.3g}x" if a.speedup else "") for a in r.attempts
    ]
    best = (
        f"best: attempt {r.best.index}" + (f", {r.best.speedup:.3g}x" if r.best.speedup else "")
        if r.best
        else "no correct attempt"
    )
    return [
        f"run {r.run_id}: {r.status}" + (f" ({r.stop_reason})" if r.stop_reason else ""),
        best,
        *bullets("attempts", attempts, most=20),
        f"tokens: {r.tokens}" if r.tokens else None,
        f"report: {r.report_uri or r.report}" if r.report else None,
    ]


def bench_lines(r: BenchSummary) -> Lines:
    s = r.suite
    fast = ", ".join(f"fast_{p} {v:.0%}" for p, v in s.fast_p.items())
    problems = [
        f"{p.problem}: {p.best_verdict or 'no candidates'}"
        + (f", {p.speedup:.3g}x" if p.speedup is not None else "")
        + (f"; {cut(p.error, 160)}" if p.error else "")
        for p in r.problems
    ]
    return [
        f"bench of {s.problems} problems on {r.target} ({pairs(device=r.device, execution=r.execution)}): "
        f"{s.correct} correct ({s.correctness_rate:.0%}), geomean speedup {num(s.geomean_speedup)}x over the correct "
        f"ones, {num(s.geomean_speedup_all)}x over all; {fast}",
        f"{r.judged_now} judged now, {r.reused} reused, {r.seconds:.0f} s",
        *bullets("problems", problems, most=40),
        *bullets("files", (f"{k}: {v}" for k, v in r.files.items()), most=6),
        *bullets("notes", (cut(n) for n in r.notes), most=4),
    ]


def submit_lines(r: SubmitResult) -> Lines:
    head = f"run {r.run_id}, attempt {r.attempt}: {r.verdict or r.error or '-'}" + (
        f", {r.speedup:.3g}x" if r.speedup else ""
    )
    return [
        head,
        f"feedback: {r.feedback}" if r.feedback else None,
        "done" + (f" ({r.stop_reason})" if r.stop_reason else "") if r.done else None,
        f"next prompt:\n{r.next_prompt}" if r.next_prompt else None,
    ]


# (result, its summary, the most characters it may take: None for a prompt the model must read whole)
SUMMARIES: list[tuple[type[BaseModel], Callable[[Any], Lines], int | None]] = [
    (VerifyReport, verify_lines, 3000),
    (ProfileReport, profile_lines, 4000),
    (AnalysisReport, analysis_lines, 4000),
    (CompileReport, compile_lines, 3000),
    (VerifyBatchReport, batch_lines, 4000),
    (TargetsReport, targets_lines, 3000),
    (JobInfo, job_lines, 3000),
    (LoopResult, loop_lines, 3000),
    (BenchSummary, bench_lines, 4000),
    (SubmitResult, submit_lines, None),
]
