"""Metal System Trace exports: the GPU intervals table of an Instruments recording, as

    xcrun xctrace export --input run.trace \\
        --xpath '/trace-toc/run[@number="1"]/data/table[@schema="metal-gpu-intervals"]'

The XML is ``<trace-query-result><node><schema name="metal-gpu-intervals"><col><mnemonic>start
</mnemonic>...</col>...</schema><row>...</row>...</node></trace-query-result>``: a row is one
element per schema column, in the schema's order. Values are interned: the first occurrence of
a value carries ``id="N"``, later ones are ``<tag ref="N"/>``. Times are nanoseconds (the
element's text; ``fmt`` holds the human form). Columns are found by mnemonic (start, duration,
channel-name, event-label, process, ...), so extra or reordered columns do not matter.

Each row is one encoder's interval on a GPU channel (Compute, Blit, Vertex, Fragment). Every
process that used the GPU is in the table; one process is kept (the one named, else the one
with the most compute intervals), and the report says which.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter, OrderedDict

from kforge_mcp.core.profile import KernelProfile, ProfileParseError, ProfileReport
from kforge_mcp.platforms.formats import MEMCPY_METRIC, busy_timeline, set_forwards

SCHEMA = "metal-gpu-intervals"
COLUMNS = {  # our name -> mnemonics seen in exports
    "start": ("start", "start-time"),
    "duration": ("duration",),
    "channel": ("channel-name", "channel", "gpu-channel-name"),
    "label": ("event-label", "label", "formatted-label", "encoder-label"),
    "process": ("process",),
}


def looks_like_xctrace(text: str) -> bool:
    head = text.lstrip()[:2048]
    return head.startswith("<?xml") and "trace-query-result" in head or head.startswith("<trace-query-result")


def _value(el: ET.Element | None) -> str:
    if el is None:
        return ""
    text = (el.text or "").strip()
    return text or el.get("fmt", "")


def _int(el: ET.Element | None, what: str, row: int, path: str) -> int:
    text = _value(el).replace(",", "")
    try:
        return int(float(text))
    except ValueError:
        raise ProfileParseError(f"{path}: row {row}: {what} is {text!r}, not nanoseconds") from None


def _process(el: ET.Element | None, resolve) -> tuple[str, int | None]:
    """(name, pid) from <process fmt="python3.12 (4242)"><pid>4242</pid>...</process>."""
    if el is None:
        return "", None
    pid_el = el.find("pid")
    pid = None
    if pid_el is not None:
        with_ref = resolve(pid_el)
        try:
            pid = int(_value(with_ref))
        except ValueError:
            pid = None
    name = el.get("fmt", "").rsplit(" (", 1)[0] or _value(el)
    return name, pid


def parse_rows(text: str, path: str) -> list[dict]:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ProfileParseError(f"{path}: invalid or truncated XML: {e}") from None
    schema = root.find(".//schema")
    if schema is None or schema.get("name") != SCHEMA:
        found = schema.get("name") if schema is not None else "none"
        raise ProfileParseError(
            f"{path}: not a {SCHEMA} export (schema: {found}); export it with "
            f'--xpath \'/trace-toc/run[@number="1"]/data/table[@schema="{SCHEMA}"]\''
        )
    mnemonics = [c.findtext("mnemonic") or "" for c in schema.findall("col")]
    at = {}
    for ours, names in COLUMNS.items():
        at[ours] = next((i for i, m in enumerate(mnemonics) if m in names), None)
    for need in ("start", "duration"):
        if at[need] is None:
            raise ProfileParseError(
                f"{path}: the {SCHEMA} schema has no '{need}' column (columns: {', '.join(mnemonics)})"
            )
    interned = {el.get("id"): el for el in root.iter() if el.get("id") is not None}

    def resolve(el: ET.Element) -> ET.Element:
        ref = el.get("ref")
        if ref is None:
            return el
        if ref not in interned:
            raise ProfileParseError(f'{path}: <{el.tag} ref="{ref}"/> refers to no earlier id')
        return interned[ref]

    rows = []
    for n, row in enumerate(root.iter("row"), start=1):
        cells = [resolve(c) for c in row]

        def cell(name):
            i = at[name]
            return cells[i] if i is not None and i < len(cells) else None

        pname, pid = _process(cell("process"), resolve)
        rows.append(
            {
                "start": _int(cell("start"), "start", n, path),
                "duration": _int(cell("duration"), "duration", n, path),
                "channel": _value(cell("channel")),
                "label": _value(cell("label")),
                "process": pname,
                "pid": pid,
            }
        )
    return rows


def report_from_xml(
    text: str, path: str = "<xctrace export>", forwards: int | None = None, process: str | None = None
) -> ProfileReport:
    rows = parse_rows(text, path)
    if not rows:
        raise ProfileParseError(f"{path}: the {SCHEMA} table has no rows (was the GPU used while recording?)")
    report = ProfileReport(
        source="xctrace", device="mps", execution="metal", file=None if path.startswith("<") else path
    )
    procs = Counter(r["process"] for r in rows if r["channel"].lower() == "compute")
    if process is not None:
        keep = [r for r in rows if process in r["process"]]
        if not keep:
            raise ProfileParseError(
                f"{path}: no GPU intervals for process '{process}' (processes: "
                f"{', '.join(sorted({r['process'] for r in rows}))})"
            )
    else:
        chosen = procs.most_common(1)[0][0] if procs else rows[0]["process"]
        keep = [r for r in rows if r["process"] == chosen]
        if len({r["process"] for r in rows}) > 1:
            report.notes.append(
                f"kept process '{chosen}' (most compute intervals); the trace also holds "
                f"{', '.join(sorted({r['process'] for r in rows} - {chosen}))}"
            )
    kernels: OrderedDict[str, KernelProfile] = OrderedDict()
    for r in keep:
        name = r["label"] or f"{r['channel'] or 'GPU'} interval"
        k = kernels.get(name)
        if k is None:
            k = kernels[name] = KernelProfile(name=name)
            k.metrics["channel_" + (r["channel"] or "unknown").lower()] = 1.0
            if r["channel"].lower() == "blit":
                k.metrics[MEMCPY_METRIC] = 1.0
        k.launches += 1
        k.device_ms += r["duration"] / 1e6
    report.kernels = list(kernels.values())
    set_forwards(report, forwards)
    for k in report.kernels:
        k.mean_ms = k.device_ms / k.launches
    t0 = min(r["start"] for r in keep)
    report.timeline = busy_timeline([((r["start"] - t0) / 1e6, (r["start"] - t0 + r["duration"]) / 1e6) for r in keep])
    report.notes.append(
        "Metal System Trace: encoder intervals per GPU channel; Apple GPUs expose no per-kernel "
        "occupancy or stall counters here"
    )
    return report
