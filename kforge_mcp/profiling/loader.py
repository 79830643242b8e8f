"""Open a captured profile of any supported format, detected from its content."""

from __future__ import annotations

from pathlib import Path

from kforge_mcp.profiling import ncu, ncu_rep, proton, torch_trace, unitrace, xctrace
from kforge_mcp.profiling.ncu import ProfileParseError
from kforge_mcp.profiling.report import ProfileReport

MAX_BYTES = 64 * 1024 * 1024
FORMATS = (
    "Nsight Compute CSV (--csv --page raw or details), .ncu-rep, torch.profiler chrome trace JSON, proton .hatchet, "
    "unitrace chrome trace JSON or --metric-query CSV, xctrace export XML (metal-gpu-intervals), "
    "a profile report saved by `kforge profile --json`"
)


def detect(text: str) -> str:
    head = text.lstrip()[:4096]
    if head.startswith("{"):
        return "torch-trace"
    if head.startswith("["):
        return "proton"
    if xctrace.looks_like_xctrace(head):
        return "xctrace"
    if unitrace.looks_like_metrics_csv(head):
        return "unitrace-csv"
    body, _ = ncu.strip_noise(text[:1_000_000])
    if body.startswith('"ID"'):
        return "ncu-csv"
    if any(line.startswith("==") for line in head.splitlines()[:20]):
        return "ncu-csv"  # ncu output without a table: ncu's own error explains it
    return "unknown"


def saved_report(data) -> dict | None:
    """A ProfileReport as ``kforge profile --json`` saves it (alone, or beside its analysis with
    --advise); None for anything else, such as a chrome trace (which holds traceEvents)."""
    if isinstance(data, dict) and isinstance(data.get("profile"), dict) and "analysis" in data:
        data = data["profile"]
    is_report = isinstance(data, dict) and "traceEvents" not in data and isinstance(data.get("kernels"), list)
    return data if is_report and {"source", "roofline", "forwards"} <= data.keys() else None


def report_from_saved(data: dict, name: str) -> ProfileReport:
    try:
        report = ProfileReport.model_validate(data)
    except Exception as e:  # noqa: BLE001  (pydantic's message says which field)
        raise ProfileParseError(f"{name}: a saved profile report that does not validate: {str(e)[:600]}") from None
    report.file = name
    return report


def load_profile(path: str | Path, forwards: int | None = None, max_bytes: int = MAX_BYTES) -> ProfileReport:
    p = Path(path).expanduser()
    name = str(p)
    if not p.is_file():
        raise ProfileParseError(f"{name}: file not found")
    size = p.stat().st_size
    if size == 0:
        raise ProfileParseError(f"{name}: the file is empty")
    if size > max_bytes:
        raise ProfileParseError(
            f"{name}: {size / 1e6:.1f} MB is over the {max_bytes / 1e6:.0f} MB limit for a captured "
            "profile; export fewer kernels or a CSV page"
        )
    if p.suffix == ".ncu-rep":
        return ncu_rep.report_from_ncu_rep(p, forwards)
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProfileParseError(f"{name}: binary file, not a text profile; supported: {FORMATS}") from None
    if not text.strip():
        raise ProfileParseError(f"{name}: the file holds only whitespace")
    return parse_text(text, name, forwards)


def parse_text(text: str, name: str = "<profile>", forwards: int | None = None) -> ProfileReport:
    kind = detect(text)
    if kind == "torch-trace":
        data = torch_trace.load_json(text, name)
        saved = saved_report(data)
        if saved is not None:
            return report_from_saved(saved, name)
        if proton.is_hatchet(data):
            return proton.report_from_hatchet(data, name, forwards)
        if unitrace.is_unitrace_trace(data):
            return unitrace.report_from_chrome(data, name, forwards)
        return torch_trace.report_from_trace(data, name, forwards)
    if kind == "proton":
        data = torch_trace.load_json(text, name)
        if isinstance(data, dict):
            return torch_trace.report_from_trace(data, name, forwards)
        return proton.report_from_hatchet(data, name, forwards)
    if kind == "ncu-csv":
        return ncu.report_from_csv(text, name, forwards)
    if kind == "unitrace-csv":
        return unitrace.report_from_metrics_csv(text, name, forwards)
    if kind == "xctrace":
        return xctrace.report_from_xml(text, name, forwards)
    raise ProfileParseError(
        f"{name}: unrecognized profile format (first line: {text.lstrip()[:80]!r}); supported: {FORMATS}"
    )
