"""docs/adding-a-target.md's example target, loaded like any target and run through compile and
verify on the CPU: the Target contract is all the engine needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from kforge_mcp import targets
from kforge_mcp.api import Engine
from kforge_mcp.core.settings import Settings
from kforge_mcp.targets.base import Target

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "numpy"

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


@pytest.fixture(scope="module")
def numpy_engine(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KFORGE_TARGETS", str(EXAMPLE))  # the engine's registry and its workers' load it from here
        engine = Engine(home=tmp_path_factory.mktemp("kforge-home"))
        try:
            yield engine
        finally:
            engine.close()
    targets.use(Settings.read())  # this process's registry as the other tests find it


def test_the_example_implements_the_contract():
    settings = Settings.read({"KFORGE_TARGETS": str(EXAMPLE)})
    target = targets.discover(settings)["numpy"]
    assert isinstance(target, Target)
    assert list(targets.discover(settings))[:4] == ["cuda", "cute", "triton", "metal"]  # shipped ones first


def test_listed_compiled_and_verified_on_cpu(numpy_engine):
    status = numpy_engine.target_status("numpy")
    assert status.available and status.devices == ["cpu"]
    report = numpy_engine.compile("numpy", CANDIDATE)
    assert report.ok, report.diagnostics
    broken = numpy_engine.compile("numpy", CANDIDATE.replace("def forward(self, x):", "def forward(self, x)"))
    assert not broken.ok and broken.diagnostics[0].line is not None
    verdict = numpy_engine.verify(PROBLEM, CANDIDATE, target="numpy", trials=2, baselines=["eager"])
    assert verdict.correct, (verdict.errors, verdict.mismatches, verdict.findings)
    assert verdict.execution == "numpy"
    wrong = numpy_engine.verify(PROBLEM, CANDIDATE.replace("2.0", "3.0"), target="numpy", trials=2, baselines=["eager"])
    assert wrong.verdict == "fail"
