"""A server's start-up: the probe without torch (driver_probe.py) finds what torch finds, says nothing where
only torch can tell, and lets the compile worker answer a fresh home's list_targets before torch's import; the
GPU warm-up runs only while its lane is idle."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kforge_mcp.api import Engine
from kforge_mcp.core.requests import Done, ProbeRequest
from kforge_mcp.core.settings import Settings
from kforge_mcp.devices import driver_probe
from kforge_mcp.devices.device import discover
from kforge_mcp.devices.driver_probe import discover_without_torch, torch_build

CUDA_BUILD = {"__version__": "2.11.0+cu130", "cuda": "13.0", "hip": None, "xpu": None}


def test_torch_build_is_what_torch_version_says():
    import torch

    build = torch_build()
    for name in ("__version__", "cuda", "hip", "xpu", "git_version"):
        assert build[name] == getattr(torch.version, name), name


def test_without_torch_it_finds_what_torch_finds():
    code = "import json, sys; from kforge_mcp.devices.driver_probe import discover_without_torch as d; "
    code += "print(json.dumps([d(), 'torch' in sys.modules]))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    found, torch_imported = json.loads(run.stdout)
    assert torch_imported is False and found is not None
    import torch

    devices, names = discover()
    assert (found[0], found[1]) == (devices, names)
    assert found[2]["torch"] == torch.__version__ and found[2].get("torch cuda") == torch.version.cuda
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        assert found[2]["arch"] == f"sm_{major}{minor}{'a' if major >= 9 else ''}"
    else:
        assert "arch" not in found[2]


@pytest.mark.parametrize(
    "build",
    [
        {"__version__": "2.9.0+xpu", "cuda": None, "hip": None, "xpu": "20250101"},
        {"__version__": "2.9.0+rocm6.4", "cuda": None, "hip": "6.4.0", "xpu": None},
        None,  # no torch at all: the probe's own import says so
    ],
)
def test_builds_only_torch_can_judge_are_left_to_torch(monkeypatch, build):
    monkeypatch.setattr(driver_probe, "torch_build", lambda: build)
    assert discover_without_torch() is None


def test_macos_is_left_to_torch(monkeypatch):
    monkeypatch.setattr(driver_probe, "torch_build", lambda: {**CUDA_BUILD, "cuda": None})
    monkeypatch.setattr(driver_probe.sys, "platform", "darwin")  # MPS: only torch.backends.mps can say
    assert discover_without_torch() is None


def test_a_cuda_build_with_no_driver_finds_no_gpu(monkeypatch):
    """torch.cuda.is_available() is False where the driver cannot be loaded; so is the answer here."""
    if driver_probe._driver() is not None:
        pytest.skip("this machine has a CUDA driver (tests/test_gpu_nvidia.py compares with torch there)")
    monkeypatch.setattr(driver_probe, "torch_build", lambda: CUDA_BUILD)
    devices, names, facts = discover_without_torch()
    assert devices == ["cpu"] and set(names) == {"cpu"}
    assert facts == {"torch": "2.11.0+cu130", "torch cuda": "13.0"}


def _maps(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ""


def test_the_compile_worker_answers_the_probe_first_and_imports_torch_after(tmp_path):
    from kforge_mcp.targets import TARGETS

    engine = Engine(home=tmp_path)
    try:
        report = engine.list_targets()
        assert report.host["probe"] == "driver"
        devices, _ = discover()  # torch's own answer, in this process: the targets judge it alike
        assert report.targets == [t.probe(devices) for t in TARGETS.values()]
        worker = engine.executor.pool._lane("compile").worker
        deadline = time.time() + 120
        while time.time() < deadline and "libtorch" not in _maps(worker.proc.pid):
            time.sleep(0.2)
        assert "libtorch" in _maps(worker.proc.pid)  # warm for the compile jobs that follow
        assert engine.compile("triton", str(Path(__file__).parents[1] / "examples/candidates/row_softmax/triton.py")).ok
    finally:
        engine.close()


def test_a_warm_up_runs_only_while_its_lane_is_idle(tmp_path):
    """The GPU warm-up's jobs: run on a lane nothing else has used, skipped (None) once a real job has run
    there or while one waits for it, whichever of the two gets the lane first."""
    import threading

    from kforge_mcp.runtime.pool import WorkerPool

    pool = WorkerPool(tmp_path, settings=Settings.read())
    try:
        assert isinstance(pool.run("compile", ProbeRequest(), 120, warm_up=True), Done)  # idle: it runs
        assert isinstance(pool.run("compile", ProbeRequest(), 120, warm_up=True), Done)  # only warm-ups so far
        assert isinstance(pool.run("compile", ProbeRequest(), 120), Done)
        assert pool.run("compile", ProbeRequest(), 120, warm_up=True) is None  # real work has run here
        for first in ("job", "warm-up"):  # a fresh lane that a job is waiting for, as a verify sent at once
            replies: dict = {}
            lane = pool._lane(f"cpu-{first}")
            run = {
                "job": lambda ln: pool.run(ln, ProbeRequest(), 120),
                "warm-up": lambda ln: pool.run(ln, ProbeRequest(), 120, warm_up=True),
            }
            with lane.lock:
                threads = []
                for name in (first, "warm-up" if first == "job" else "job"):
                    threads.append(threading.Thread(target=lambda n=name: replies.setdefault(n, run[n](lane.name))))
                    threads[-1].start()
                    deadline = time.time() + 10
                    while time.time() < deadline and lane.waiting < len(threads):
                        time.sleep(0.01)
            for t in threads:
                t.join(120)
            assert replies["warm-up"] is None and isinstance(replies["job"], Done), (first, replies)
    finally:
        pool.shutdown()
