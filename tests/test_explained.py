"""Failures that say what failed: parameters drawn in another order, the sandbox's refusals, inputs
larger than a worker may hold, a hang's line; and what a CPU-only user is told (placeholder peaks,
a roofline of bytes for a problem without products, autotuned kernels on the interpreter)."""

from __future__ import annotations

import io
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import CANDIDATES, ROOT
from rich.console import Console

from kforge_mcp.api import Engine
from kforge_mcp.cli import bench, console, reports
from kforge_mcp.core.errors import InputError
from kforge_mcp.judge.roofline import PLACEHOLDER_NOTE, make_roofline, placeholder_peaks
from kforge_mcp.suite_report import BenchSummary, ProblemResult, SuiteMetrics

PROBLEMS = ROOT / "tests" / "problems"
FAST = {"target": "triton", "trials": 1, "baselines": ["eager"], "timing_budget_s": 0.1}


# ---- weights matched by seed ----


def test_parameters_drawn_in_another_order_are_named_beside_the_mismatch(engine):
    problem = str(PROBLEMS / "layernorm_own_weights.py")
    swapped = (CANDIDATES / "layernorm_draw_order.py").read_text()
    report = engine.verify(problem, swapped, **FAST)
    assert report.verdict == "fail" and report.mismatches, report
    finding = next(f for f in report.findings if f.code == "weights_differ")
    assert "ModelNew.weight differs from Model.weight" in finding.message, finding.message
    assert "ModelNew.bias differs from Model.bias" in finding.message, finding.message
    assert f"seed {report.seed * 2**20}" in finding.message and "same order" in finding.message
    assert set(finding.evidence["parameters"]) == {"weight", "bias"}

    in_order = swapped.replace(
        "self.bias = nn.Parameter(torch.randn(hidden))\n        self.weight = nn.Parameter(torch.randn(hidden))",
        "self.weight = nn.Parameter(torch.randn(hidden))\n        self.bias = nn.Parameter(torch.randn(hidden))",
    )
    assert in_order != swapped
    report = engine.verify(problem, in_order, **FAST)
    assert report.verdict == "pass" and "weights_differ" not in {f.code for f in report.findings}, report


# ---- the sandbox's refusals ----

SOFTMAX = str(ROOT / "examples" / "problems" / "row_softmax.py")
WRITES_TO = """import torch
import torch.nn as nn
from pathlib import Path


class ModelNew(nn.Module):
    def forward(self, x):
        Path({path!r}).write_text("escaped")
        return torch.softmax(x, dim=-1)
"""


def sandbox_has(engine, protection: str) -> bool:
    return f"{protection}: on" in engine.list_targets().host["sandbox"]


def test_a_write_the_sandbox_refuses_says_so_and_what_it_allows(engine, tmp_path):
    if not sandbox_has(engine, "landlock"):
        pytest.skip("Landlock is not applied here")
    target = tmp_path / "escaped.txt"
    report = engine.verify(SOFTMAX, WRITES_TO.format(path=str(target)), **FAST)
    assert report.verdict == "error" and not target.exists()
    error = report.errors[0]
    assert error.startswith("ModelNew.forward raised PermissionError"), error
    assert f"the sandbox refused writing to {target}: candidates and problems may write only under " in error
    # the allowed folders are grouped by their common parent: /tmp/{kforge-workers-...,torchinductor_root}
    assert engine.pool.tmp.name in error and "make no network connections" in error, error
    line = next(d for d in report.diagnostics if d.line == 8)  # the candidate's write
    assert f"(the sandbox refused writing to {target})" in line.message, report.diagnostics


def test_a_connection_the_sandbox_refuses_names_its_address(engine):
    if not (sandbox_has(engine, "network") or sandbox_has(engine, "landlock")):
        pytest.skip("neither the network namespace nor Landlock applies here")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        source = (CANDIDATES / "hostile_network.py").read_text().replace("PORT = 0", f"PORT = {port}")
        report = engine.verify(SOFTMAX, source, **FAST)
    assert report.verdict == "error"
    assert f"the sandbox refused a connection to 127.0.0.1:{port}: " in report.errors[0], report.errors


def test_a_problem_the_sandbox_refuses_a_write_is_told_so(engine, tmp_path):
    if not sandbox_has(engine, "landlock"):
        pytest.skip("Landlock is not applied here")
    target = tmp_path / "inputs-cache.pt"
    problem = (
        Path(SOFTMAX)
        .read_text()
        .replace("def get_inputs():\n", f"def get_inputs():\n    open({str(target)!r}, 'w').write('x')\n")
    )
    with pytest.raises(InputError) as raised:
        engine.verify(problem, str(ROOT / "examples/candidates/row_softmax/triton.py"), **FAST)
    assert "problem: get_inputs() raised PermissionError" in raised.value.message
    assert f"the sandbox refused writing to {target}: " in raised.value.message, raised.value.message


# ---- memory ----


@pytest.fixture(scope="module")
def small_engine(tmp_path_factory):
    """Workers held to 1.5 GiB."""
    eng = Engine(home=tmp_path_factory.mktemp("small-home"), memory_limit_mb=1536)
    yield eng
    eng.close()


def test_inputs_larger_than_a_worker_may_hold_are_the_problems_error_named_with_the_limit(tmp_path):
    """Sized on the meta device before a byte exists: 2 GiB of inputs against a 1.5 GiB worker."""
    from kforge_mcp.core.problem import Source, load_problem

    text = Path(SOFTMAX).read_text().replace("rows, cols = 256, 1000", "rows, cols = 32768, 16384")  # 2 GiB
    problem = load_problem(Source(text, "big_softmax.py"), tmp_path)
    problem.check_inputs_fit(4096)  # fits
    with pytest.raises(InputError) as raised:
        problem.check_inputs_fit(1536)
    message = raised.value.message
    assert message.startswith("problem: get_inputs() makes 2.0 GiB of tensors (32768x16384 float32)"), message
    assert "its memory limit is 1.5 GiB (KFORGE_WORKER_MEMORY_MB=1536" in message, message


def test_on_the_cpu_lane_the_inputs_that_must_fit_are_those_that_run(small_engine):
    """Triton's interpreter runs a reduced instance of a problem too big for it: the 2 GiB of published inputs are
    never made, the verdict comes from the smaller one and says so."""
    problem = Path(SOFTMAX).read_text().replace("rows, cols = 256, 1000", "rows, cols = 32768, 16384")
    report = small_engine.verify(problem, str(ROOT / "examples/candidates/row_softmax/triton.py"), **FAST)
    assert report.verdict == "pass", report.errors
    assert "reduced_instance" in {f.code for f in report.findings}


@pytest.mark.slow
def test_a_worker_killed_for_memory_says_in_which_step_and_what_limits_it(small_engine):
    report = small_engine.verify(SOFTMAX, str(CANDIDATES / "memory_hog.py"), **FAST)
    assert report.verdict == "error"
    assert report.errors[0].startswith("verify used more than 1.5 GiB of memory during correctness trial 1/1;")
    assert "(the limit is KFORGE_WORKER_MEMORY_MB=1536)" in report.errors[0], report.errors


# ---- a hang ----

HANGS_AFTER_PROFILING = """import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        with torch.profiler.profile():
            torch.softmax(x, dim=-1)
        while True:
            time.sleep(0.1)
"""


@pytest.mark.slow
def test_a_hang_names_the_line_it_was_killed_on_and_carries_no_profiler_log(engine):
    report = engine.verify(SOFTMAX, HANGS_AFTER_PROFILING, **{**FAST, "timeout_s": 15})
    assert report.verdict == "error"
    assert "the worker was killed while it ran line 12 of the candidate (in forward)" in report.errors[0], report.errors
    assert report.diagnostics[0].line == 12, report.diagnostics
    assert "candidate_" in report.errors[1] and "line 12 in forward" in report.errors[1], report.errors
    assert not any(word in "\n".join(report.errors) for word in ("USDT", "STAGE:", "profiler_start")), report.errors


# ---- what a CPU-only user is told ----


def test_a_problem_without_products_gets_a_roofline_of_bytes_only():
    r = make_roofline(0.0, 4e6, "fp32", "H100 SXM", out_bytes=2e6)
    assert r.paths == [] and r.bound == "memory" and r.path_reason.startswith("none: no matrix products"), r
    for word in ("tensor", "MMA", "bf16", "tf32", "path"):
        assert word not in r.bound_reason, r.bound_reason
    gemm = make_roofline(2e12, 4e6, "fp32", "H100 SXM")
    assert gemm.paths and "bf16" in {p.path for p in gemm.paths}  # products keep their paths


def test_placeholder_peaks_are_said_wherever_their_bound_is_printed(engine, monkeypatch):
    assert placeholder_peaks(make_roofline(0.0, 4e6, "fp32", "cpu"))
    assert PLACEHOLDER_NOTE in make_roofline(1e9, 4e6, "fp32", "cpu").bound_reason
    assert PLACEHOLDER_NOTE not in make_roofline(1e9, 4e6, "fp32", "H200").bound_reason

    report = engine.profile(SOFTMAX, target="triton", device="cpu")
    screen = Console(width=200, file=io.StringIO(), color_system=None)
    monkeypatch.setattr(reports, "out", screen)
    reports.print_profile(report)
    line = next(x for x in screen.file.getvalue().splitlines() if x.startswith("roofline"))
    assert "(bytes only)" in line and "path" not in line, line
    assert line.endswith(f"fraction of SOL {report.roofline.fraction_of_sol:.1%} ({PLACEHOLDER_NOTE})"), line


def test_an_autotuned_kernel_runs_its_first_config_that_runs_on_the_interpreter(engine):
    """The widest config first: it fails its static_assert, so the next one runs, and the report says which."""
    source = (CANDIDATES / "autotuned.py").read_text()
    widest = '        triton.Config({"BLOCK": 16384}, num_warps=16, num_stages=3),\n'
    assert widest in source
    source = source.replace(widest, "").replace("    configs=[\n", "    configs=[\n" + widest)
    problem = (ROOT / "examples/problems/fused_bias_gelu.py").read_text().replace("512, 1024", "4, 256")
    report = engine.verify(problem, source, **FAST)
    assert report.verdict == "pass", (report.errors, report.mismatches)
    finding = next(f for f in report.findings if f.code == "autotune_first_config")
    assert finding.evidence["configs"] == {"bias_gelu_scale_kernel": "BLOCK=256, num_warps=2, num_stages=1"}
    assert "cannot time autotune configs" in finding.message and "on a GPU" in finding.message


def bench_summary() -> BenchSummary:
    def row(problem: str, verdict: str, candidate: str, speedup: float) -> ProblemResult:
        return ProblemResult(
            problem=problem,
            path=f"examples/problems/{problem}.py",
            correct=verdict == "pass",
            best_verdict=verdict,
            best_candidate=f"{problem}/{candidate}",
            speedup=speedup,
            speedup_eager=speedup * 1.5,
            speedup_compiled=speedup,
        )

    problems = [
        row("fused_bias_gelu", "pass", "triton_autotuned.py", 0.0213),
        row("gemm_bias_relu", "suspicious", "triton_3xtf32_fed.py", 0.00412),
        row("row_softmax", "pass", "triton.py", 0.0288),
    ]
    suite = SuiteMetrics(problems=3, correct=2, correctness_rate=2 / 3, candidates_judged=12)
    return BenchSummary(target="triton", mode="verify", problems_dir="p", out="o", suite=suite, problems=problems)


@pytest.mark.parametrize("width", [80, 200])
def test_the_bench_table_keeps_the_winning_candidate_in_view(width, monkeypatch):
    screen = Console(width=width, file=io.StringIO(), color_system=None)
    for module in (console, bench):
        monkeypatch.setattr(module, "out", screen)
    monkeypatch.setattr(console, "PIPED", False)
    bench.print_summary(bench_summary())
    text = screen.file.getvalue()
    assert max(len(line) for line in text.splitlines()) <= width, text
    for name in ("triton_autotuned.py", "triton_3xtf32_fed.py", "suspicious", "0.00412"):
        assert re.search(rf"│ {re.escape(name)}\s+│", text) or f"{name} │" in text, (name, text)
    if width == 80:
        assert "left out at 80 columns: vs eager" in text.replace("\n", " "), text


def test_the_readmes_bench_command_writes_where_git_ignores_it():
    command = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("kforge bench"))
    out = command.split("--out ")[1].split()[0]
    inside = not Path(out).is_absolute() and not out.startswith("~")
    if inside:  # a folder of the working tree: its results must not show up as changes
        ignored = subprocess.run(["git", "check-ignore", "-q", f"{out}/summary.json"], cwd=ROOT)
        assert ignored.returncode == 0, f"{out} is not in .gitignore"


# ---- the banners ----


def banner_until(args: list[str], home: Path, wanted: tuple[str, ...], timeout: float = 120) -> str:
    """The server's stderr until every ``wanted`` line start has shown (stdin stays open: stdio serves on)."""
    env = {**os.environ, "KFORGE_HOME": str(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kforge_mcp.cli", "serve", *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not all(any(x.startswith(w) for x in lines) for w in wanted):
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    return "".join(lines)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_both_banners_give_the_command_and_the_targets(transport, tmp_path):
    args = ["--transport", transport] + (["--port", str(free_port())] if transport == "http" else [])
    text = banner_until(args, tmp_path / "home", ("command:", "targets:"))
    lines = text.splitlines()
    command = next((x for x in lines if x.startswith("command: ")), None)
    assert command is not None and "kforge-mcp" in command, text
    targets = next((x for x in lines if x.startswith("targets: ")), None)
    assert targets is not None and "triton (" in targets, text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the README's GPU set-up ----


def test_the_readme_gives_the_gpu_set_up_beside_the_cpu_one():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    assert blocks[0].strip().endswith(".venv/bin/kforge serve --transport http"), blocks[0]  # the opening two
    tests = blocks[1].strip().rsplit(" && ", 1)[-1]
    assert tests.startswith(".venv/bin/pytest -q"), blocks[1]
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines(), tests  # CI runs the README's test command
    gpu = next((b for b in blocks if "pytest -q -m gpu" in b), None)
    assert gpu is not None, "no GPU set-up block"
    assert "--index-url https://download.pytorch.org/whl/cu" in gpu and "nvcc" in gpu and "--version" in gpu, gpu
    assert ".venv/bin/kforge targets" in gpu, gpu
    assert '"gpu: ' in (ROOT / "pyproject.toml").read_text()  # the marker it selects is declared
