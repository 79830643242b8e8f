"""docs/adding-a-target.md's example platform (docs/examples/hostcpu), loaded from outside the package like any
platform: verify, profile and analyze_profile go through its contract alone, in the workers and here. It claims
the CPU: its device-wide state is guarded in verify, its peaks price the roofline, its profiler captures depth
'metrics', its file format is read back and the analysis reads its profiles in its own words."""

from __future__ import annotations

from pathlib import Path

import pytest

from kforge_mcp import platforms, targets
from kforge_mcp.api import Engine
from kforge_mcp.core.errors import InputError
from kforge_mcp.core.profile import KernelProfile, ProfileReport
from kforge_mcp.core.settings import Settings
from kforge_mcp.devices.device import get_device
from kforge_mcp.platforms.base import Platform

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "hostcpu"
NUMPY_TARGET = ROOT / "docs" / "examples" / "numpy"

PROBLEM = """
import torch
from torch import nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0

def get_inputs():
    return [torch.randn(64, 128)]

def get_init_inputs():
    return []
"""

CANDIDATE = """
import numpy as np
import torch
from torch import nn
from kforge_target_numpy.target import kernel

@kernel
def relu_times_two(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0) * np.float32(2.0)

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.from_numpy(relu_times_two(x.numpy()))
"""

# the same kernel, leaving torch's intra-op thread count changed behind it
THREADS = CANDIDATE.replace(
    "        return torch.from_numpy(",
    "        torch.set_num_threads(torch.get_num_threads() + 1)\n        return torch.from_numpy(",
)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KFORGE_PLATFORMS", str(EXAMPLE))  # the engine's registries and its workers' load it from here
        mp.setenv("KFORGE_TARGETS", str(NUMPY_TARGET))
        engine = Engine(home=tmp_path_factory.mktemp("kforge-home"))
        try:
            yield engine
        finally:
            engine.close()
    platforms.use(Settings.read())  # this process's registries as the other tests find them
    targets.use(Settings.read())


def test_the_example_implements_the_contract_and_claims_the_cpu(engine):
    found = platforms.discover(str(EXAMPLE))
    assert isinstance(found["hostcpu"], Platform)
    assert list(found)[0] == "hostcpu" and list(found)[-1] == "cpu"  # by order: it comes before the CPU's
    cpu = get_device("cpu")
    assert cpu.platform.name == "hostcpu" and cpu.display_name().startswith("Host CPU: ")
    assert platforms.lookup_peaks(cpu.display_name())[0].name == "Host CPU (example)"


def test_verify_guards_the_platforms_device_state(engine):
    honest = engine.verify(PROBLEM, CANDIDATE, target="numpy", device="cpu", trials=2, baselines=["eager"])
    assert honest.verdict == "pass", (honest.errors, honest.findings)
    assert not [f for f in honest.findings if f.code == "device_state_changed"]
    threads = engine.verify(PROBLEM, THREADS, target="numpy", device="cpu", trials=2, baselines=["eager"])
    changed = next(f for f in threads.findings if f.code == "device_state_changed")
    assert set(changed.evidence["changed"]) == {"intra_op_threads"} and changed.evidence["unrestored"] == []
    before = changed.evidence["changed"]["intra_op_threads"]
    assert before["after"] == before["before"] + 1  # the first change seen is the candidate's own, put back after


def test_profile_and_analyze_through_its_profiler_and_peaks(engine, tmp_path):
    report = engine.profile(PROBLEM, CANDIDATE, target="numpy", device="cpu", depth="metrics", iterations=3)
    assert not report.errors, report.errors
    assert report.source == "torch.profiler+wallclock" and report.device_name.startswith("Host CPU: ")
    assert report.timeline["intervals"] == 3 and report.timeline["busy_ms"] > 0
    assert report.roofline.device == "Host CPU (example)" and "example figures" in report.roofline.peaks_source
    assert report.roofline.peak_bandwidth == 20e9
    captured = tmp_path / "wallclock.csv"
    captured.write_text(report.raw["wallclock.csv"])  # the file its profiler wrote, read back by its own parser
    analysis = engine.analyze_profile(path=str(captured), problem=PROBLEM)
    assert analysis.source == "wallclock" and analysis.summary
    assert analysis.roofline.device == "Host CPU (example)" and analysis.roofline.measured_ms > 0
    broken = tmp_path / "broken.csv"
    broken.write_text("hostcpu wallclock 1\ndevice,Host CPU: x\n0.0,fast\n")
    with pytest.raises(InputError, match="not .start_ms,duration_ms."):
        engine.analyze_profile(path=str(broken))


def test_the_analysis_reads_its_profiles_in_its_own_words(engine):
    """The example's vocabulary names the host's matrix unit ('amx') as its tensor pipe: a profile from that host
    gets advice on it with no edit to advice/; from a device no platform knows, the same pipe is no word the
    analysis reads."""

    def analysis(device_name: str | None):
        kernel = KernelProfile(
            name="matmul_amx", launches=1, device_ms=1.0, mean_ms=1.0, pipes={"amx": 92.0}, num_warps=1
        )
        report = ProfileReport(source="a host profiler", device_name=device_name, kernels=[kernel], forwards=1)
        return engine.analyze_profile(profile=report.model_dump())

    on_host = analysis("Host CPU: test")
    limit = next(r for r in on_host.recommendations if r.rule == "at_the_limit")
    assert [(e.metric, e.value) for e in limit.evidence if e.kernel] == [("amx pipe busy", "92.0%")]
    assert not any(r.rule == "at_the_limit" for r in analysis(None).recommendations)
    # a rule that cannot do without a word the vocabulary lacks says which
    not_run = {n.rule: n.reason for n in on_host.rules_not_run}
    assert not_run["latency_bound"].startswith("needs the SM count") and "the warp size" in not_run["latency_bound"]
