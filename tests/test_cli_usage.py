"""The `kforge` CLI as people use it, run for real as subprocesses: PTX to a file, the candidate under
either name, a mistyped path, the runs list and ids by prefix, verify-batch's judging options, a named
device's roofline, and profiles saved as JSON read back."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import types
import uuid

import pytest
from conftest import ROOT, example, problem

from kforge_mcp.core.errors import InputError
from kforge_mcp.profiling.loader import load_profile
from kforge_mcp.store import RunStore

PROFILES = ROOT / "tests" / "data" / "profiles"


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("kforge-home")


def kforge(home, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    env = {**os.environ, "KFORGE_HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, "-m", "kforge_mcp.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_compile_out_writes_the_ptx_to_a_file_and_takes_the_candidate_as_an_option(home, tmp_path):
    ptx = tmp_path / "softmax.ptx"
    candidate = example("row_softmax", "triton")
    proc = kforge(home, "compile", "--candidate", candidate, "--target", "triton", "--out", str(ptx))
    assert proc.returncode == 0, proc.stderr
    text = ptx.read_text()
    assert text.startswith("// PTX of softmax_kernel\n") and ".entry softmax_kernel" in text
    assert ".entry" not in proc.stdout and f"written to {ptx}" in proc.stdout  # the report, not the PTX
    both = kforge(
        home, "compile", candidate, "--candidate", example("row_softmax", "triton_naive"), "--target", "triton"
    )
    assert both.returncode == 2 and "once" in both.stderr


def test_piped_ptx_has_a_short_heading(home):
    proc = kforge(home, "compile", example("row_softmax", "triton"), "--target", "triton", "--ptx")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "--- PTX softmax_kernel ---" in lines
    # no heading line of kilobytes (the PTX used to share one with its title); a note names the file's path
    assert max(len(line) for line in lines if not line.startswith(("\t", " ", "//", "."))) < 1000


def test_a_mistyped_path_is_file_not_found(home, tmp_path):
    proc = kforge(home, "compile", str(tmp_path / "kernels" / "gemm"), "--target", "triton")
    assert proc.returncode == 2 and "file not found" in proc.stderr and "SyntaxError" not in proc.stdout


def test_runs_lists_recent_runs_and_ids_work_by_unique_prefix(tmp_path, monkeypatch):
    home = tmp_path / "home"
    store = RunStore.for_home(home)
    ids = iter(["a1b2c3d4e5f6", "a1b2ffff0000", "9f8e7d6c5b4a"])  # two that start alike
    monkeypatch.setattr(uuid, "uuid4", lambda: types.SimpleNamespace(hex=next(ids) + "0" * 20))
    runs = [store.create_run(problem("row_softmax"), "triton", "anthropic", "row_softmax") for _ in range(3)]
    store.update_run(runs[0].id, status="done", stop_reason="max_iterations")
    listed = json.loads(kforge(home, "runs", "--json").stdout)["runs"]
    assert [r["id"] for r in listed] == [r.id for r in reversed(runs)]  # newest first
    assert (
        listed[-1]["status"] == "done" and listed[-1]["problem"] == "row_softmax" and listed[-1]["target"] == "triton"
    )
    table = kforge(home, "runs")
    assert all(r.id in table.stdout for r in runs), table.stdout

    for prefix, full in (("a1b2c", "a1b2c3d4e5f6"), ("9", "9f8e7d6c5b4a")):
        report = kforge(home, "report", prefix, "--json")
        assert report.returncode == 0, report.stderr
        files = json.loads(report.stdout)
        assert files["run_id"] == full and os.path.isfile(files["html"])
        assert store.get_run(prefix).id == full
    ambiguous = kforge(home, "report", "a1b2")
    assert ambiguous.returncode == 2 and "matches 2 runs" in ambiguous.stderr
    unknown = kforge(home, "report", "zzzz")
    assert unknown.returncode == 2 and "unknown run_id" in unknown.stderr


@pytest.mark.slow
def test_verify_batch_takes_the_judging_options(home):
    args = ["verify-batch", problem("row_softmax"), example("row_softmax", "triton"), "--target", "triton"]
    args += ["--trials", "1", "--baselines", "eager", "--seed", "11", "--atol", "1e-3", "--rtol", "1e-3", "--json"]
    proc = kforge(home, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (report,) = json.loads(proc.stdout)["reports"]
    assert report["verdict"] == "pass" and report["seed"] == 11 and (report["atol"], report["rtol"]) == (1e-3, 1e-3)


def test_profile_of_the_reference_with_a_device_model_gives_that_devices_bound(home):
    proc = kforge(home, "profile", problem("gemm_bias_relu"), "--target", "triton", "--device-model", "h200", "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)["roofline"]
    assert r["device"] == "H200" and r["modeled"] is True and r["peak_bandwidth"] == 4.8e12
    assert r["measured_ms"] is None and r["fraction_of_sol"] is None  # a CPU's time is no H200's
    assert r["sol_ms"] == pytest.approx(max(r["flops"] / r["peak_flops"], r["bytes"] / 4.8e12) * 1e3)
    assert any("a model" in n for n in r["notes"])
    unknown = kforge(home, "profile", problem("gemm_bias_relu"), "--target", "triton", "--device-model", "h900")
    assert unknown.returncode == 2 and "not in the peaks table" in unknown.stderr and "H200" in unknown.stderr


def test_profile_advise_json_keeps_the_analysis_and_analyze_reads_it_back(home, tmp_path):
    args = ["profile", problem("row_softmax"), example("row_softmax", "triton"), "--target", "triton"]
    proc = kforge(home, *args, "--advise", "--json")
    assert proc.returncode == 0, proc.stderr
    both = json.loads(proc.stdout)
    assert set(both) == {"profile", "analysis"}
    assert "recommendations" in both["analysis"] and both["analysis"]["summary"]
    saved = tmp_path / "profile.json"
    saved.write_text(proc.stdout)
    again = json.loads(kforge(home, "analyze", str(saved), "--json").stdout)
    assert again["source"] == both["profile"]["source"] and again["roofline"] == both["profile"]["roofline"]


def test_analyze_reads_a_saved_profile_report_as_the_report_it_is(home, tmp_path):
    captured = PROFILES / "row_softmax-triton_naive.ncu-raw.csv"
    saved = tmp_path / "profile.json"  # what `kforge profile --json > profile.json` leaves
    saved.write_text(load_profile(captured).model_dump_json(indent=2))
    direct = json.loads(kforge(home, "analyze", str(captured), "--json").stdout)
    read_back = json.loads(kforge(home, "analyze", str(saved), "--json").stdout)
    assert direct["recommendations"], direct
    assert read_back["recommendations"] == direct["recommendations"]
    assert read_back["source"] == direct["source"] == "ncu"


@pytest.mark.parametrize("width", [60, 80, 200])
def test_a_fitted_table_keeps_every_number_whole_at_any_width(width, monkeypatch):
    from rich.console import Console
    from rich.text import Text

    from kforge_mcp.cli import console

    screen = Console(width=width, file=io.StringIO(), color_system=None)
    monkeypatch.setattr(console, "out", screen)
    monkeypatch.setattr(console, "PIPED", False)
    cols = [console.Col("name", min_width=16), console.Col("total ms", numeric=True)]
    cols += [console.Col(f"metric {i}", numeric=True, drop=i) for i in range(1, 6)]
    numbers = ["1542307.3215", "0.000123", "98.76", "12345678", "3.5", "77.25"]
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
    screen.print(console.fitted_table(cols, [[Text(name), *numbers]]))
    text = screen.file.getvalue()
    assert max(len(line) for line in text.splitlines()) <= width and "…" not in text
    shown = [n for n in numbers if re.search(rf"│\s+{re.escape(n)} │", text)]
    assert shown[:2] == numbers[:2]  # the kept columns, whole
    left = re.search(r"left out at \d+ columns: (.*) \(--json", text.replace("\n", " "))
    assert len(shown) == len(numbers) if width == 200 else left and len(shown) + left[1].count("metric") == 6


# ---- one CLI: the same names for the same thing in every verb, from the calls' models ----

RUNS_A_WORKER = ("compile", "verify", "verify-batch", "profile", "bench", "run-loop")


def verbs():
    from kforge_mcp.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def option(verb, flag):
    return next((a for a in verbs()[verb]._actions if flag in a.option_strings), None)


def test_every_verb_that_runs_a_worker_takes_timeout_in_seconds():
    for verb in RUNS_A_WORKER:
        timeout = option(verb, "--timeout")
        assert timeout is not None and timeout.dest == "timeout_s" and timeout.metavar == "S", verb
        assert not any(s.endswith("-s") for a in verbs()[verb]._actions for s in a.option_strings), verb


def test_a_list_option_is_comma_separated_in_every_verb():
    from kforge_mcp.cli.main import build_parser

    required = {
        "verify": ["p.py", "c.py", "--target", "triton"],
        "verify-batch": ["p.py", "c.py", "--target", "triton"],
        "bench": ["--problems", "p", "--candidates", "c", "--out", "o", "--target", "triton"],
        "run-loop": ["p.py", "--target", "triton", "--provider", "openai"],
    }
    for verb, args in required.items():
        parsed = build_parser().parse_args([verb, *args, "--baselines", "eager,compiled"])
        assert parsed.baselines == ["eager", "compiled"], verb
        assert option(verb, "--baselines").nargs is None, verb  # one value, comma-separated


def test_a_shared_option_says_what_the_tools_model_says():
    from kforge_mcp.core.options import VerifyOptions

    for verb in ("verify", "verify-batch", "bench", "run-loop"):
        for flag, name in (("--trials", "trials"), ("--timeout", "timeout_s")):
            assert option(verb, flag).help.startswith(VerifyOptions.model_fields[name].description), (verb, flag)
    assert option("verify", "--precision").choices == ["fp32", "tf32", "bf16", "fp16"]


def test_run_loop_usage_shows_what_it_requires_and_every_target():
    from kforge_mcp.targets import TARGETS

    usage = verbs()["run-loop"].format_usage()
    first = usage.splitlines()[0]
    assert "PROBLEM --target {" + ",".join(TARGETS) + "} --provider {anthropic,openai}" in first, usage
    assert "[--target" not in usage and "[--provider {anthropic,openai}]" in usage.splitlines()[1]  # resume's default
    assert "--resume RUN_ID" in usage


def test_library_arguments_are_checked_once_against_the_model_and_name_the_field(engine):
    with pytest.raises(InputError, match=r"verify: trials must be an integer in \[1, 100\], got 0"):
        engine.verify(problem("row_softmax"), example("row_softmax", "triton"), "triton", trials=0)
    with pytest.raises(InputError, match=r"unknown argument 'trals' \(did you mean 'trials'\?\)"):
        engine.verify(problem("row_softmax"), example("row_softmax", "triton"), "triton", trals=1)
    with pytest.raises(InputError, match=r"profile: depth must be 'timeline' or 'metrics', got 'deep'"):
        engine.profile(problem("row_softmax"), target="triton", depth="deep")
