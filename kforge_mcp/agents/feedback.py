"""Reports turned into text a generation agent can act on: why an attempt failed (the repair
prompt's feedback). The optimization pass's feedback is loop.optimize_feedback."""

from __future__ import annotations

from kforge_mcp.store import Attempt


def _source_line(source: str | None, line: int | None) -> str | None:
    if not source or not line:
        return None
    lines = source.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else None


def _diagnostics_text(diags: list[dict], source: str | None) -> list[str]:
    out = []
    for d in diags[:10]:
        where = (
            f"line {d['line']}" + (f", column {d['column']}" if d.get("column") else "")
            if d.get("line")
            else "candidate"
        )
        out.append(f"- {where}: {d.get('severity', 'error')}: {d['message']}")
        src = _source_line(source, d.get("line"))
        if src is not None:
            out.append(f"    {src.strip()}")
    return out


def _g(v) -> str:
    return "?" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)


def failure_feedback(attempt: Attempt) -> str:
    """Why an attempt is not (yet) acceptable, in the words the repair prompt uses."""
    if attempt.error:
        return f"Your reply could not be used: {attempt.error}"
    lines: list[str] = []
    c = attempt.compile_report
    if c is not None and not c.get("ok"):
        lines.append("It did not compile:")
        lines += _diagnostics_text(c.get("diagnostics", []), attempt.candidate)
        return "\n".join(lines)
    v = attempt.verify_report or {}
    verdict = v.get("verdict")
    if verdict == "error":
        lines.append("It compiled but failed at run time:")
        lines += _diagnostics_text(v.get("diagnostics", []), attempt.candidate)
        lines += [f"- {e.strip()[-1500:]}" for e in v.get("errors", []) if e and e.strip()][:4]
    elif verdict == "fail":
        lines.append("It ran but its outputs do not match the reference:")
        for m in v.get("mismatches", [])[:4]:
            at = (
                f" first mismatch at index {m['first_mismatch_index']}"
                if m.get("first_mismatch_index") is not None
                else ""
            )
            lines.append(
                f"- trial {m['trial']}, output {m.get('output_index', 0)}: {m['reason']};{at} expected "
                f"{_g(m.get('expected'))}, got {_g(m.get('got'))}; max_abs_error {_g(m.get('max_abs_error'))}, "
                f"mean_abs_error {_g(m.get('mean_abs_error'))}, max_rel_error {_g(m.get('max_rel_error'))}, "
                f"mismatched fraction {_g(m.get('mismatched_fraction'))} (atol {_g(m.get('atol'))}, "
                f"rtol {_g(m.get('rtol'))})"
            )
    elif verdict == "suspicious":
        lines.append("It matched the reference but was flagged as suspicious (it must do the work in its own kernels):")
    if verdict in ("fail", "suspicious", "error"):
        for f in v.get("findings", []):
            if f.get("severity") in ("suspicious", "fail"):
                lines.append(f"- {f['code']}: {f['message']}")
    return "\n".join(lines) or f"It was not accepted (verdict {verdict})."
