"""Parsers and rules for Intel unitrace (chrome trace, --metric-query CSV) and Apple xctrace
(metal-gpu-intervals export) on the sample files in tests/data/profiles. The samples are
hand-made to the documented formats (no Intel or Apple GPU here): see that folder's README."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from mcp import Client

from kforge_mcp.advice import agent
from kforge_mcp.core.profile import ProfileParseError
from kforge_mcp.platforms.formats import busy_timeline
from kforge_mcp.platforms.intel.unitrace import split_name
from kforge_mcp.profiling.loader import detect, load_profile, parse_text

DATA = Path(__file__).resolve().parent / "data" / "profiles"
UNITRACE_JSON = DATA / "fused_bias_gelu-triton_naive.unitrace.json"
UNITRACE_CSV = DATA / "fused_bias_gelu-triton_naive.unitrace-metrics.csv"
XCTRACE_XML = DATA / "fused_bias_gelu-metal.xctrace.xml"


def test_detection_by_content():
    assert detect(UNITRACE_CSV.read_text()) == "unitrace-csv"
    assert detect(XCTRACE_XML.read_text()) == "xctrace"
    assert load_profile(UNITRACE_JSON).source == "unitrace"  # a chrome trace whose device events are gpu_op


def test_kernel_names_and_launch_shape():
    assert split_name("Tile #1: gelu_kernel[SIMD16 {512; 2; 1} {64; 4; 1}]") == (
        "gelu_kernel",
        {"simd_width": 16, "work_groups": 1024, "work_group_size": 256},
    )
    assert split_name("zeCommandListAppendMemoryCopy(M2D)[4096]") == ("zeCommandListAppendMemoryCopy(M2D)[4096]", {})


def test_busy_timeline_merges_overlaps():
    t = busy_timeline([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)])
    assert (t["span_ms"], t["busy_ms"], t["idle_ms"], t["gaps"], t["largest_gap_ms"]) == (4.0, 3.0, 1.0, 1.0, 1.0)


def test_unitrace_chrome_trace_matches_the_file():
    r = load_profile(UNITRACE_JSON)
    events = [e for e in json.loads(UNITRACE_JSON.read_text())["traceEvents"] if e.get("cat") == "gpu_op"]
    assert [k.name for k in r.kernels] == ["add_bias_kernel", "gelu_kernel", "scale_kernel"]
    assert r.forwards == 5 and r.forwards_inferred and r.launches_per_forward == 3 and r.device == "xpu"
    gelu = [e["dur"] for e in events if e["name"].startswith("gelu_kernel")]
    assert r.kernels[1].launches == 5 and r.kernels[1].device_ms == pytest.approx(sum(gelu) / 1e3)
    assert r.kernels[0].metrics["work_groups"] == 512 and r.kernels[0].metrics["simd_width"] == 32
    assert r.timeline["busy_ms"] == pytest.approx(sum(e["dur"] for e in events) / 1e3)
    assert r.timeline["intervals"] == 15 and r.timeline["idle_ms"] > r.timeline["busy_ms"]
    assert r.host_overhead_ms > 0  # zeCommandListAppendLaunchKernel time per forward


def test_unitrace_metric_csv_matches_the_file():
    r = load_profile(UNITRACE_CSV)
    lines = UNITRACE_CSV.read_text().strip().splitlines()
    header = [h.strip() for h in lines[2].split(",")]
    rows = [row for row in csv.reader(lines[3:], skipinitialspace=True)]
    add = [row for row in rows if row[0].startswith("add_bias_kernel")]
    ns, stall = header.index("GpuTime[ns]"), header.index("XVE_STALL[%]")
    k = r.kernels[0]
    assert k.name == "add_bias_kernel" and k.launches == 5
    assert k.device_ms == pytest.approx(sum(float(row[ns]) for row in add) / 1e6)
    weighted = sum(float(row[ns]) * float(row[stall]) for row in add) / sum(float(row[ns]) for row in add)
    assert k.metrics["xve_stall_pct"] == pytest.approx(weighted)
    assert k.metrics["xve_idle_pct"] == pytest.approx(100 - k.metrics["xve_active_pct"] - weighted)
    assert k.dram_bytes_read == sum(float(row[header.index("GPU_MEMORY_BYTE_READ[bytes]")]) for row in add)
    assert k.achieved_occupancy_pct == pytest.approx(k.metrics["occupancy_pct"]) and k.metrics["gpu_memory_gbps"] > 100


def test_unitrace_rules_name_stalls_idle_engines_and_gaps():
    csv_recs = {x.rule: x for x in agent.analyze(load_profile(UNITRACE_CSV)).recommendations}
    assert csv_recs["xve_stalled"].kernels == ["add_bias_kernel", "gelu_kernel"]
    assert csv_recs["xve_idle"].kernels == ["scale_kernel"]
    assert any(e.metric == "XVE idle" and e.kernel == "scale_kernel" for e in csv_recs["xve_idle"].evidence)
    assert "fuse_launches" in csv_recs
    trace = agent.analyze(load_profile(UNITRACE_JSON))
    assert trace.recommendations[0].rule in ("device_idle_gaps", "fuse_launches")
    gaps = next(x for x in trace.recommendations if x.rule == "device_idle_gaps")
    assert 0 < gaps.expected_gain <= 0.5 and any(e.metric == "idle gaps between busy runs" for e in gaps.evidence)


def test_xctrace_export_resolves_interned_values_and_keeps_one_process():
    r = load_profile(XCTRACE_XML)
    assert r.source == "xctrace" and r.device == "mps" and r.execution == "metal"
    assert [k.name for k in r.kernels] == ["Compute Command Encoder"]
    k = r.kernels[0]
    assert k.launches == 5 and r.forwards == 5 and k.metrics["channel_compute"] == 1
    # every python3.12 interval, none of WindowServer's (whose fragment work overlaps them)
    import xml.etree.ElementTree as ET

    root = ET.parse(XCTRACE_XML).getroot()
    ids = {el.get("id"): el for el in root.iter() if el.get("id")}
    durations = []
    for row in root.iter("row"):
        proc = row.find("process")
        proc = ids[proc.get("ref")] if proc.get("ref") else proc
        if proc.get("fmt", "").startswith("python3.12"):
            d = row.find("duration")
            durations.append(int((ids[d.get("ref")] if d.get("ref") else d).text))
    assert k.device_ms == pytest.approx(sum(durations) / 1e6) and len(durations) == 5
    assert any("WindowServer" in n for n in r.notes)
    rec = agent.analyze(r).recommendations[0]
    assert rec.rule == "device_idle_gaps" and r.timeline["gaps"] == 4


def test_xctrace_process_can_be_chosen():
    from kforge_mcp.platforms.apple.xctrace import report_from_xml

    r = report_from_xml(XCTRACE_XML.read_text(), process="WindowServer")
    assert [k.name for k in r.kernels] == ["Fragment Encoder"] and r.kernels[0].launches == 3
    with pytest.raises(ProfileParseError, match="no GPU intervals for process 'Safari'"):
        report_from_xml(XCTRACE_XML.read_text(), process="Safari")


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '<?xml version="1.0"?>\n<trace-query-result><node><schema name="time-profile"></schema></node></trace-query-result>',
            "not a metal-gpu-intervals export (schema: time-profile)",
        ),
        (
            '<?xml version="1.0"?>\n<trace-query-result><node><schema name="metal-gpu-intervals">',
            "invalid or truncated XML",
        ),
        (
            '<?xml version="1.0"?>\n<trace-query-result><node><schema name="metal-gpu-intervals"><col><mnemonic>start</mnemonic>'
            '</col><col><mnemonic>duration</mnemonic></col></schema><row><start-time>1</start-time><duration ref="9"/></row>'
            "</node></trace-query-result>",
            'ref="9"/> refers to no earlier id',
        ),
        (
            '<?xml version="1.0"?>\n<trace-query-result><node><schema name="metal-gpu-intervals"><col><mnemonic>start</mnemonic>'
            "</col></schema></node></trace-query-result>",
            "has no 'duration' column",
        ),
        (
            '\n=== Device #0 Metrics ===\n\nKernel, GlobalInstanceId, XVE_ACTIVE[%]\n"k", 1, 50\n',
            "no GpuTime[ns] column",
        ),
        (
            '\n=== Device #0 Metrics ===\n\nKernel, GlobalInstanceId, GpuTime[ns]\n"k", 1, fast\n',
            "GpuTime[ns] is 'fast'",
        ),
        (
            '\n=== Device #0 Metrics ===\n\nKernel, GlobalInstanceId, GpuTime[ns], XVE_ACTIVE[%]\n"k", 1\n',
            "data row 1 has 2 cells",
        ),
        (
            '{"traceEvents": [{"ph": "X", "cat": "gpu_op", "name": "k", "ts": "soon", "dur": 1}]}',
            "non-numeric ts or dur",
        ),
    ],
)
def test_bad_files_get_errors_that_say_what_is_wrong(text, message):
    with pytest.raises(ProfileParseError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        parse_text(text, "bad")


@pytest.mark.anyio
async def test_analyze_profile_tool_reads_the_samples(server):
    async with Client(server) as client:
        results = [await client.call_tool("analyze_profile", {"path": str(p)}) for p in (UNITRACE_CSV, XCTRACE_XML)]
    for r in results:
        assert not r.is_error, r.content
    assert "xve_stalled" in {x["rule"] for x in results[0].structured_content["recommendations"]}
    assert results[1].structured_content["source"] == "xctrace"
