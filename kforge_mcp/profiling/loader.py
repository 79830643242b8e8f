"""Open a captured profile of any supported format, detected from its content: a report kforge saved, the formats
of every platform's profilers (kforge_mcp/platforms/<vendor>/), then the profilers every vendor shares
(proton, torch.profiler)."""

from __future__ import annotations

from pathlib import Path

from kforge_mcp import platforms
from kforge_mcp.core.profile import ProfileParseError, ProfileReport
from kforge_mcp.platforms.formats import ProfileFormat, load_json
from kforge_mcp.profiling import proton, torch_trace

MAX_BYTES = 64 * 1024 * 1024
SAVED = "a profile report saved by `kforge profile --json`"
# every vendor's: after the platforms' formats, so a vendor's chrome trace is read as its own
SHARED = (
    ProfileFormat(
        "proton",
        "proton .hatchet",
        detect=lambda text, data: isinstance(data, list),
        parse=lambda text, data, name, forwards: proton.report_from_hatchet(data, name, forwards),
    ),
    ProfileFormat(
        "torch-trace",
        "torch.profiler chrome trace JSON",
        detect=lambda text, data: isinstance(data, dict),
        parse=lambda text, data, name, forwards: torch_trace.report_from_trace(data, name, forwards),
    ),
)


def formats() -> list[ProfileFormat]:
    return platforms.profile_formats() + list(SHARED)


def readable() -> str:
    """The formats analyze_profile reads, for messages and tool descriptions."""
    return ", ".join([f.description for f in formats()] + [SAVED])


def _json(text: str, name: str):
    """The text's JSON when it is JSON (None otherwise); invalid JSON is an error that says where."""
    return load_json(text, name) if text.lstrip()[:1] in ("{", "[") else None


def detect(text: str) -> str:
    """The key of the format the text is in ('ncu-csv', 'unitrace-csv', 'torch-trace', ...), or 'unknown'."""
    data = _json(text, "<profile>")
    return next((f.key for f in formats() if f.detect and f.detect(text, data)), "unknown")


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
    binary = next((f for f in formats() if f.suffix and f.read and p.suffix == f.suffix), None)
    if binary is not None and binary.read is not None:
        return binary.read(p, forwards)
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProfileParseError(f"{name}: binary file, not a text profile; supported: {readable()}") from None
    if not text.strip():
        raise ProfileParseError(f"{name}: the file holds only whitespace")
    return parse_text(text, name, forwards)


def parse_text(text: str, name: str = "<profile>", forwards: int | None = None) -> ProfileReport:
    data = _json(text, name)
    saved = saved_report(data)
    if saved is not None:
        return report_from_saved(saved, name)
    for f in formats():
        if f.detect and f.parse and f.detect(text, data):
            return f.parse(text, data, name, forwards)
    raise ProfileParseError(
        f"{name}: unrecognized profile format (first line: {text.lstrip()[:80]!r}); supported: {readable()}"
    )
