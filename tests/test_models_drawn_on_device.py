"""Model and ModelNew draw their parameters on the device they run on (a Level 2 GEMM's 8192x8192 kaiming init took
0.4-0.7 s a model on the host), both from one generator: where either cannot be built there, both are built on the
host and moved. The meta device stands in for a GPU here: code that reads values back cannot run on it."""

from __future__ import annotations

from pathlib import Path

from kforge_mcp.core.problem import build_models, load_problem
from kforge_mcp.core.source import Source, import_source

PROBLEM = """
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)
        self.drawn_on = torch.empty(1).device.type
    def forward(self, x):
        return self.linear(x)
def get_inputs():
    return [torch.randn(2, 8)]
def get_init_inputs():
    return [8]
"""

CANDIDATE = """
import torch, torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)
        {extra}
        self.drawn_on = torch.empty(1).device.type
    def forward(self, x):
        return self.linear(x)
"""


def _build(tmp_path: Path, extra: str):
    problem = load_problem(Source(PROBLEM, "problem.py"), tmp_path)
    candidate = import_source(Source(CANDIDATE.format(extra=extra), "candidate.py"), tmp_path, "candidate")
    reference, model = build_models(problem, candidate, "meta")
    return (reference.drawn_on, model.drawn_on), reference, model


def test_both_models_are_drawn_on_the_device(tmp_path):
    drawn, reference, model = _build(tmp_path, "pass")
    assert drawn == ("meta", "meta")
    assert reference.linear.weight.device.type == model.linear.weight.device.type == "meta"


def test_a_constructor_that_cannot_run_on_the_device_builds_both_on_the_host(tmp_path):
    drawn, reference, model = _build(tmp_path, "self.table = torch.arange(4).numpy().tolist()")
    assert drawn == ("cpu", "cpu")  # both again, from one generator
    assert reference.linear.weight.device.type == model.linear.weight.device.type == "meta"
