"""The `kforge` CLI as people see it: each command run in a real terminal 80 columns wide (a tmux pane),
its screen read back. Every line fits, no number is cut (rich marks a cut cell with an ellipsis), and
notes print once. Skips where tmux is missing (.ci/run installs it)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, example, hostile, problem

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install -y tmux)"),
]

WIDTH = 80
CHEATS = Path(__file__).resolve().parent / "cheats"


@pytest.fixture(scope="module")
def terminal(tmp_path_factory):
    """run(args) -> (exit code, screen): `kforge args` in an 80-column tmux pane of a private server."""
    tmp = tmp_path_factory.mktemp("terminal")
    socket = f"kforge-test-{os.getpid()}"
    env = {**os.environ, "KFORGE_HOME": str(tmp / "home")}
    env.pop("COLUMNS", None)
    env.pop("TMUX", None)
    conf = tmp / "tmux.conf"
    conf.write_text("set -g history-limit 20000\nset -g default-terminal xterm-256color\n")
    runs = iter(range(1000))

    def run(*args: str, timeout: float = 400) -> tuple[int, str]:
        n = next(runs)
        done = tmp / f"done-{n}"
        command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "kforge_mcp.cli", *args])
        script = tmp / f"run-{n}.sh"
        script.write_text(f"cd {shlex.quote(str(ROOT))}\n{command}\necho $? > {done}\nsleep 600\n")
        session = f"run{n}"  # a session of its own, its one window WIDTH columns wide
        tmux = ["tmux", "-L", socket, "-f", str(conf)]
        subprocess.run(
            [*tmux, "new-session", "-d", "-s", session, "-x", str(WIDTH), "-y", "50", f"bash {script}"],
            env=env,
            check=True,
        )
        target = session
        deadline = time.monotonic() + timeout
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert done.exists(), f"kforge {' '.join(args)} did not finish in {timeout} s"
        width = subprocess.run([*tmux, "display", "-p", "-t", target, "#{pane_width}"], capture_output=True, text=True)
        assert width.stdout.strip() == str(WIDTH), width.stdout
        screen = subprocess.run(  # -J: lines the terminal wrapped come back whole, so an overlong line shows
            [*tmux, "capture-pane", "-p", "-J", "-S", "-", "-t", target], capture_output=True, text=True, check=True
        ).stdout
        return int(done.read_text()), screen.rstrip()

    yield run
    subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def check_screen(screen: str) -> list[str]:
    lines = [line.rstrip() for line in screen.splitlines()]
    too_wide = [line for line in lines if len(line) > WIDTH]
    assert not too_wide, "\n".join(too_wide)
    assert "…" not in screen, screen  # a cell rich cut short
    assert "Traceback" not in screen, screen
    return lines


def kforge_json(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "kforge_mcp.cli", *args, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=400
    )
    return json.loads(done.stdout)


def test_targets_fits_and_says_why(terminal):
    code, screen = terminal("targets")
    lines = check_screen(screen)
    assert code == 0
    for name in ("cuda", "cute", "triton", "metal"):
        assert any(line.startswith(f"{name}: ") for line in lines), screen  # its reason, below the table
    assert len(lines) < 60, screen


def test_compile_fits_and_keeps_every_number(terminal):
    code, screen = terminal("compile", hostile("autotuned"), "--target", "triton")
    check_screen(screen)
    assert code == 0
    report = kforge_json("compile", hostile("autotuned"), "--target", "triton")
    rows = [line for line in screen.splitlines() if line.startswith("│")]
    for k in report["kernels"]:  # each config's numbers, whole, in the order of the columns
        numbers = [str(v) for v in (k["registers"], k["spills"], k["shared_bytes"], k["num_warps"], k["num_stages"])]
        assert any(re.search(r"\s+│\s+".join(numbers) + r"\s+│$", row) for row in rows), (numbers, screen)


def test_verify_fits(terminal):
    args = ("verify", problem("row_softmax"), example("row_softmax", "triton"), "--target", "triton")
    code, screen = terminal(*args, "--trials", "1", "--baselines", "eager")
    check_screen(screen)
    assert code == 0 and "verdict PASS" in screen
    assert re.search(r"│ candidate\s+│\s+\d+\.\d{4} │", screen), screen


def test_profile_fits_and_prints_its_notes_once(terminal):
    args = ("profile", problem("row_softmax"), example("row_softmax", "triton"), "--target", "triton")
    code, screen = terminal(*args, "--advise")
    lines = check_screen(screen)
    assert code == 0
    name_rows = [line for line in lines if line.startswith("│ ")]
    assert name_rows and all(
        re.search(r"│\s+\d+ │\s+\d+\.\d{4} │\s+\d+\.\d{2} │", r) for r in name_rows if "aten::" in r
    )
    interpreter_note = [line for line in lines if line.startswith("Triton interpreter on CPU")]
    assert len(interpreter_note) == 1, screen


def test_bench_fits(terminal, tmp_path):
    problems, candidates = tmp_path / "problems", tmp_path / "cands" / "small_softmax"
    problems.mkdir()
    candidates.mkdir(parents=True)
    shutil.copy(CHEATS / "problem.py", problems / "small_softmax.py")
    shutil.copy(CHEATS / "honest.py", candidates / "sample_0.py")
    code, screen = terminal(
        "bench",
        "--problems",
        str(problems),
        "--candidates",
        str(tmp_path / "cands"),
        "--target",
        "triton",
        "--out",
        str(tmp_path / "out"),
        "--trials",
        "1",
        "--baselines",
        "eager",
        "--timing-budget",
        "0.2",
        "--no-plot",
    )
    check_screen(screen)
    assert code == 0, screen
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    speedup = format(summary["problems"][0]["speedup"], ".3g")
    assert re.search(rf"│ small_softmax\s+│ pass\s+│.*│\s+{re.escape(speedup)} │", screen), screen


def test_a_mismatch_wraps_between_numbers_never_inside_one(terminal):
    args = ("verify", problem("fused_bias_gelu"), example("fused_bias_gelu", "triton_wrong"), "--target", "triton")
    args += ("--trials", "1", "--baselines", "eager", "--seed", "7")
    code, screen = terminal(*args)
    check_screen(screen)
    assert code == 1 and "verdict FAIL" in screen
    m = kforge_json(*args)["mismatches"][0]
    shown = re.search(r"expected\s+(\S+),\s+got\s+(\S+)", screen)  # \s: across a line break, if any
    assert shown, screen
    assert shown.groups() == (format(m["expected"], ".6g"), format(m["got"], ".6g")), screen
