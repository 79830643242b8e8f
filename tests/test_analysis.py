"""Profile parsers, rules and the analysis agent on real H100 captures (tests/data/profiles)."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from kforge_mcp.advice import agent, rules
from kforge_mcp.advice.rules.base import DEVICE_KERNELS
from kforge_mcp.advice.rules.compute import COMPUTE
from kforge_mcp.core.profile import ProfileParseError
from kforge_mcp.judge.roofline import lookup_peaks, make_roofline
from kforge_mcp.platforms.nvidia import ncu
from kforge_mcp.profiling.loader import load_profile
from kforge_mcp.profiling.report import Evidence, KernelProfile, ProfileReport, Recommendation

DATA = Path(__file__).resolve().parent / "data" / "profiles"


def f(name: str) -> str:
    return str(DATA / name)


def raw_rows(name: str):
    rows = list(csv.reader(open(DATA / name)))
    return rows[0], rows[2:]


# ---- parsers ----


def test_ncu_raw_kernels_launches_and_metrics_match_the_csv():
    r = load_profile(f("row_softmax-triton_naive.ncu-raw.csv"))
    assert r.source == "ncu" and r.device_name == "NVIDIA H100 80GB HBM3" and r.sm_count == 132
    assert [k.name for k in r.kernels] == ["row_max_kernel", "row_sum_exp_kernel", "normalize_kernel"]
    assert r.forwards == 3 and r.forwards_inferred and r.launches_per_forward == 3
    header, rows = raw_rows("row_softmax-triton_naive.ncu-raw.csv")
    col = header.index("gpu__time_duration.sum")  # unit: us
    times = [float(row[col]) for row in rows if row[header.index("Kernel Name")] == "row_max_kernel"]
    k = r.kernels[0]
    assert k.launches == 3 and k.device_ms == pytest.approx(sum(times) / 1e3)
    assert k.block == [32, 1, 1] and k.grid == [256, 1, 1] and k.registers == 16
    assert k.achieved_occupancy_pct == pytest.approx(2.89, abs=0.01) and k.theoretical_occupancy_pct == 50
    assert k.dram_bytes_read == pytest.approx(1.02784e6, rel=1e-3)  # "Mbyte" scaled to bytes
    assert k.global_load_sectors_per_request == pytest.approx(32000 / 8192)
    assert k.global_store_bytes_per_sector == 4.0 and k.top_stalls[0].reason == "long_scoreboard"


def test_ncu_thousands_separators_and_tensor_metrics():
    k = load_profile(f("gemm_bias_relu-triton.ncu-raw.csv")).kernels[0]
    assert k.name == "linear_relu_kernel" and k.registers == 164 and k.grid == [4, 6, 1]
    assert k.occupancy_limiter == "registers" and k.occupancy_limiters["registers"] == 3
    assert k.tensor_pipe_pct < 1 and k.mean_ms == pytest.approx(0.0616, rel=0.01)


def test_ncu_details_page_keeps_ncu_rules_with_speedups():
    r = load_profile(f("row_softmax-triton_naive.ncu-details.csv"))
    assert r.source == "ncu details" and len(r.kernels) == 3
    assert r.kernels[0].achieved_occupancy_pct == pytest.approx(2.89, abs=0.01)
    occ = [x for x in r.ncu_rules if x.rule == "AchievedOccupancy" and x.kernel == "row_max_kernel"]
    assert (
        occ and occ[0].speedup_type == "global" and occ[0].speedup_pct == pytest.approx(91.9, abs=0.1)
    )  # mean over 3 launches


def test_ncu_stdout_noise_is_stripped():
    text = (DATA / "fused_bias_gelu-triton.ncu-raw.csv").read_text()
    noisy = (
        "==PROF== Connected to process 1 (python)\nprogram output\n==WARNING== something\n"
        + text
        + "==PROF== Disconnected\n"
    )
    r = ncu.report_from_csv(noisy)
    assert [k.name for k in r.kernels] == ["bias_gelu_scale_kernel"] and r.kernels[0].launches == 3


def test_torch_trace_kernels_grid_block_registers_occupancy():
    r = load_profile(f("fused_bias_gelu-triton_naive.torch-trace.json"))
    assert r.source == "torch.profiler" and r.device_name == "NVIDIA H100 80GB HBM3" and r.sm_count == 132
    assert [k.name for k in r.kernels] == ["add_bias_kernel", "gelu_kernel", "scale_kernel"]
    assert r.forwards == 5 and r.launches_per_forward == 3
    events = [
        e
        for e in json.load(open(DATA / "fused_bias_gelu-triton_naive.torch-trace.json"))["traceEvents"]
        if e.get("cat") == "kernel" and e["name"] == "gelu_kernel"
    ]
    k = r.kernels[1]
    assert k.launches == 5 and k.device_ms == pytest.approx(sum(e["dur"] for e in events) / 1e3)
    assert k.block == events[0]["args"]["block"] and k.registers == events[0]["args"]["registers per thread"]
    assert k.achieved_occupancy_pct == 24 and r.host_overhead_ms > 0


def test_proton_hatchet():
    r = load_profile(f("row_softmax-triton_naive.proton.hatchet"))
    assert r.source == "proton" and {k.name for k in r.kernels} == {
        "row_max_kernel",
        "row_sum_exp_kernel",
        "normalize_kernel",
    }
    k = next(k for k in r.kernels if k.name == "normalize_kernel")
    assert k.launches == 5 and k.device_ms == pytest.approx(13952 / 1e6) and r.sm_count == 132


@pytest.mark.parametrize(
    "content,message",
    [
        ("", "empty"),
        ('"ID","Process ID","Kernel Name"\n', "truncated"),
        ("hello,world\n1,2\n", "unrecognized profile format"),
        ('{"traceEvents": [', "invalid or truncated JSON"),
        ('{"foo": 1}', "not a torch.profiler chrome trace"),
        ('{"traceEvents": []}', "nothing was profiled"),
        ('{"traceEvents": [{"ph": "M", "name": "process_name"}]}', "no complete"),
        ("==PROF== Connected\n==ERROR== The application returned an error code (1).\n", "ncu said"),
    ],
)
def test_bad_files_get_clear_errors(tmp_path, content, message):
    p = tmp_path / "bad.csv"
    p.write_text(content)
    with pytest.raises(ProfileParseError) as e:
        load_profile(p)
    assert str(p) in str(e.value) and message in str(e.value)


def test_truncated_real_csv_names_the_row(tmp_path):
    lines = (DATA / "row_softmax-triton.ncu-raw.csv").read_text().splitlines()
    p = tmp_path / "cut.csv"
    p.write_text("\n".join(lines[:3]) + "\n" + lines[3][:500])
    with pytest.raises(ProfileParseError, match="truncated"):
        load_profile(p)


def test_size_cap_and_ncu_rep_without_module(tmp_path):
    with pytest.raises(ProfileParseError, match="limit"):
        load_profile(f("fused_bias_gelu-reference.ncu-raw.csv"), max_bytes=1000)
    rep = tmp_path / "x.ncu-rep"
    rep.write_bytes(b"\0" * 10)
    with pytest.raises(ProfileParseError, match="ncu_report"):
        load_profile(rep)


# ---- roofline ----


def test_peaks_table_and_sol():
    peaks, note = lookup_peaks("NVIDIA H100 80GB HBM3")
    assert peaks.name == "H100 SXM" and peaks.bandwidth == 3.35e12 and peaks.flops["bf16"] == 989.5e12 and note is None
    assert lookup_peaks("NVIDIA H200")[0].bandwidth == 4.8e12
    r = make_roofline(
        flops=2 * 256 * 512 * 384, nbytes=1.7e6, dtype="fp32", device_name="NVIDIA H100 80GB HBM3", measured_ms=0.0616
    )
    # fp32 at KernelBench's 1e-4: 3xTF32 on tensor cores (a third of TF32) is the fastest path that meets it
    assert r.path == "3xtf32" and r.peak_flops == pytest.approx(494.5e12 / 3) and r.bound == "compute"
    assert r.sol_ms == pytest.approx(max(2 * 256 * 512 * 384 / (494.5e12 / 3), 1.7e6 / 3.35e12) * 1e3)
    assert r.fraction_of_sol == pytest.approx(r.sol_ms / 0.0616) and not r.below_bound
    assert make_roofline(0, 4e6, device_name="H100", peak_bandwidth=1e12).byte_ms == pytest.approx(4e-3)


# ---- rules and the agent ----

PAIRS = [
    ("fused_bias_gelu", "ncu-raw.csv"),
    ("fused_bias_gelu", "ncu-details.csv"),
    ("fused_bias_gelu", "torch-trace.json"),
    ("fused_bias_gelu", "proton.hatchet"),
    ("row_softmax", "ncu-raw.csv"),
    ("row_softmax", "ncu-details.csv"),
    ("row_softmax", "torch-trace.json"),
    ("row_softmax", "proton.hatchet"),
]


@pytest.mark.parametrize("problem,kind", PAIRS)
def test_naive_advice_ranks_above_anything_on_the_tuned_version(problem, kind):
    naive = agent.analyze(load_profile(f(f"{problem}-triton_naive.{kind}")))
    tuned = agent.analyze(load_profile(f(f"{problem}-triton.{kind}")))
    assert naive.recommendations and naive.recommendations[0].priority == "high"
    best_tuned = max((r.expected_gain for r in tuned.recommendations), default=0.0)
    assert naive.recommendations[0].expected_gain > best_tuned
    assert all(r.rule != "fuse_launches" for r in tuned.recommendations)


def test_fuse_launches_fires_on_the_three_kernel_gelu():
    a = agent.analyze(load_profile(f("fused_bias_gelu-triton_naive.ncu-raw.csv")))
    top = a.recommendations[0]
    assert top.rule == "fuse_launches" and 0.5 < top.expected_gain < 0.8
    assert top.kernels == ["add_bias_kernel", "gelu_kernel", "scale_kernel"]
    assert any(e.metric == "launches per forward" and e.value == 3 for e in top.evidence)
    assert "Fuse" in a.summary and top.gain_basis


def test_latency_bound_fires_on_the_one_warp_softmax():
    report = load_profile(f("row_softmax-triton_naive.torch-trace.json"))
    report.target = "triton"  # a trace does not say which language its kernels are in; the profile tool does
    a = agent.analyze(report)
    rules_fired = {r.rule: r for r in a.recommendations}
    assert a.recommendations[0].rule == "latency_bound" and "fuse_launches" in rules_fired
    assert any(e.metric == "warps per block" and e.value == 1 for e in rules_fired["latency_bound"].evidence)
    assert "num_warps" in rules_fired["latency_bound"].action


def test_small_grid_fires_on_the_24_block_gemm():
    a = agent.analyze(load_profile(f("gemm_bias_relu-triton.ncu-raw.csv")))
    assert a.recommendations[0].rule == "grid_too_small"
    assert any(e.value == 24 for e in a.recommendations[0].evidence)


def test_tensor_core_gain_from_the_flops_at_the_faster_path_or_from_the_fma_pipe():
    report = load_profile(f("gemm_bias_relu-triton.ncu-raw.csv"))
    report.target = "triton"
    report.roofline = make_roofline(
        2 * 256 * 512 * 384, 1.7e6, "fp32", report.device_name, report.device_ms_per_forward
    )
    rec = next(r for r in agent.analyze(report).recommendations if r.rule == "use_tensor_cores")
    # its FLOPs at the low end of what a first 3xTF32 kernel reaches (20% of the peak, measured on the H200) on
    # the 24 of 132 SMs its grid uses, against the 61.6 us it takes; the basis states the range
    low, high = COMPUTE.multi_term_efficiency
    after_ms = 2 * 256 * 512 * 384 / (494.5e12 / 3 * low * 24 / 132) * 1e3
    assert rec.expected_gain == pytest.approx(1 - after_ms / report.device_ms_per_forward, abs=1e-3)
    assert "tf32x3" in rec.action and "3xtf32" in rec.title and f"x {low:g})" in rec.gain_basis
    assert f"{low:.0%} to {high:.0%}" in rec.gain_basis
    bare = load_profile(f("gemm_bias_relu-triton.ncu-raw.csv"))  # no roofline: only the FMA-busy time shrinks
    rec = next(r for r in agent.analyze(bare).recommendations if r.rule == "use_tensor_cores")
    assert rec.expected_gain == pytest.approx(bare.kernels[0].fma_pipe_pct / 100 * (1 - 67 / (494.5 / 3)), abs=1e-3)


def test_uncoalesced_rule_on_a_synthetic_kernel():
    k = KernelProfile(
        name="transpose",
        launches=1,
        device_ms=1.0,
        global_load_sectors=1000,
        global_load_bytes_per_sector=4.0,
        global_store_sectors=100,
        global_store_bytes_per_sector=32.0,
        memory_throughput_pct=80,
        sm_throughput_pct=10,
    )
    recs = rules.uncoalesced_access(ProfileReport(source="ncu", kernels=[k], forwards=1, launches_per_forward=1))
    assert recs and recs[0].expected_gain == pytest.approx(1000 * 28 / 32 / 1100, abs=1e-3)


@dataclass(frozen=True)
class LongKernel:
    mean_ms: float = 0.05  # a launch this long is worth splitting (the example's own choice)


def _long_kernels(report: ProfileReport, t: LongKernel) -> list[Recommendation]:
    return [
        rules.recommendation(
            rule="long",
            title="long kernel",
            action="split it",
            expected_gain=0.3,
            evidence=[Evidence(metric="mean ms", value=k.mean_ms, kernel=k.name)],
        )
        for k in report.device_kernels()
        if k.mean_ms > t.mean_ms
    ]


def test_a_new_rule_is_a_rule_with_its_needs_and_thresholds():
    long_kernels = rules.Rule("long", _long_kernels, LongKernel(), (DEVICE_KERNELS,))
    report = load_profile(f("gemm_bias_relu-triton.ncu-raw.csv"))
    a = agent.analyze(report, rules=[long_kernels])
    assert [r.rule for r in a.recommendations] == ["long"] and a.recommendations[0].priority == "high"
    # its thresholds are its own: a stricter copy says nothing about a 62 us kernel
    strict = replace(long_kernels, thresholds=LongKernel(mean_ms=1.0))
    assert agent.analyze(report, rules=[strict]).recommendations == []
    # a report without what it needs: the rule does not run, and the analysis says why
    cpu = ProfileReport(source="torch.profiler", device="cpu", kernels=[KernelProfile(name="aten::mm", kind="cpu")])
    out = agent.analyze(cpu, rules=[long_kernels])
    assert not out.recommendations and out.rules_not_run[0].rule == "long"
    assert "device kernels" in out.rules_not_run[0].reason and "a GPU run" in out.rules_not_run[0].reason


def test_broken_rule_becomes_a_note_and_narrator_is_optional():
    def boom(report, thresholds):
        raise RuntimeError("boom")

    broken = rules.Rule("broken", boom, None)
    report = load_profile(f("fused_bias_gelu-triton_naive.ncu-raw.csv"))
    a = agent.analyze(report, rules=[broken, rules.fuse_launches])
    assert a.recommendations and any("broken" in n for n in a.notes) and a.narrative is None
    agent.configure_narrator(lambda rep, recs: f"{len(recs)} recommendation(s)")
    try:
        assert agent.analyze(report).narrative.endswith("recommendation(s)")
    finally:
        agent.configure_narrator(None)


def test_image_needs_an_llm(tmp_path):
    img = tmp_path / "ncu.png"
    img.write_bytes(b"\x89PNG....")
    a = agent.analyze_image(img)
    assert not a.recommendations and "LLM" in a.summary
