"""One attempt checked: the reply's candidate extracted, compiled, verified and, when correct,
profiled for the analysis agent's advice; then recorded in the run store."""

from __future__ import annotations

import functools
import threading

from kforge_mcp.agents.extract import ExtractionError, extract_candidate
from kforge_mcp.agents.reply import Progress
from kforge_mcp.agents.results import LoopOptions
from kforge_mcp.core.errors import InputError, KforgeError
from kforge_mcp.store import Attempt, Pass, Run, RunStore


def check_reply(
    engine,
    store: RunStore,
    run: Run,
    opts: LoopOptions,
    pass_: Pass,
    prompt: str,
    reply: str,
    on_progress: Progress,
    cancel: threading.Event | None,
    tokens: int | None = None,
    round: int | None = None,
    label: str | None = None,
) -> Attempt:
    """Extract, compile, verify (and for a correct one, profile) one reply; record it as an attempt."""
    say = on_progress or (lambda _m: None)
    n = label or f"attempt {run.attempts}"
    add = functools.partial(store.add_attempt, run.id, pass_, prompt=prompt, reply=reply, tokens=tokens, round=round)
    try:
        code = extract_candidate(reply).code
    except ExtractionError as e:
        return add(error=str(e))
    say(f"{n}: compiling")
    try:
        comp = engine.compile(run.target, code, problem=run.problem, timeout_s=opts.timeout_s, cancel=cancel)
    except InputError as e:  # e.g. no ModelNew: the agent's fault, so it is feedback, not a tool error
        return add(candidate=code, error=str(e))
    if not comp.ok:
        return add(candidate=code, compile_report=comp.model_dump(mode="json"))
    say(f"{n}: verifying")
    try:
        ver = engine.verify(
            run.problem,
            code,
            target=run.target,
            device=opts.device,
            trials=opts.trials,
            atol=opts.atol,
            rtol=opts.rtol,
            timeout_s=opts.timeout_s,
            baselines=opts.baselines,
            timing_budget_s=opts.timing_budget_s,
            on_progress=on_progress,
            cancel=cancel,
        )
    except InputError as e:
        return add(candidate=code, compile_report=comp.model_dump(mode="json"), error=str(e))
    correct = ver.verdict == "pass"
    recs = None
    if correct and opts.optimize and opts.profile:
        say(f"{n}: profiling")
        recs = profile_advice(engine, run, code, opts, cancel)
    return add(
        candidate=code,
        compile_report=comp.model_dump(mode="json"),
        verify_report=ver.model_dump(mode="json"),
        recommendations=recs,
        speedup=ver.speedup,
        correct=correct,
    )


def profile_advice(engine, run: Run, code: str, opts: LoopOptions, cancel) -> list[dict]:
    """The analysis agent's recommendations for a correct candidate, plus its summary line."""
    try:
        prof = engine.profile(
            run.problem,
            code,
            target=run.target,
            device=opts.device,
            depth=opts.profile_depth,
            iterations=3,
            timeout_s=opts.timeout_s,
            cancel=cancel,
        )
        if prof.errors:
            return [{"_summary": "profiling failed: " + "; ".join(e for e in prof.errors if e)[:500]}]
        analysis = engine.analyze_profile(
            profile=prof.model_dump(mode="json"), problem=run.problem, atol=opts.atol, rtol=opts.rtol
        )
    except KforgeError as e:
        return [{"_summary": f"profiling failed: {e}"}]
    recs = [r.model_dump(mode="json") for r in analysis.recommendations]
    # the roofline rides with the summary, so a run's view can draw it (kforge://runs/{id}/roofline.png)
    roof = analysis.roofline.model_dump(mode="json") if analysis.roofline else None
    return recs + [{"_summary": analysis.summary, "_roofline": roof}]
