"""A reduced instance of a problem (core/reduced.py): which sizes shrink is found by building the problem on the
meta device, so channels, features and kernel sizes stay, and the shapes it produced are said."""

from __future__ import annotations

import math

import pytest
import torch

from kforge_mcp.core.problem import load_problem, reference_model
from kforge_mcp.core.reduced import MIXED_BATCH_FLOOR, reduce_problem, samples_mix
from kforge_mcp.core.source import Source

CONV_GAP = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        return torch.nn.functional.adaptive_avg_pool2d(torch.nn.functional.gelu(self.conv(x)), 1).flatten(1)


batch_size = 128
in_channels = 8
out_channels = 64
height, width = 256, 256
kernel_size = 3


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
"""

# depth is averaged away downstream, height and width are kept in the output
CONVT_MEAN = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, padding=1)

    def forward(self, x):
        return torch.softmax(self.conv_transpose(x).mean(dim=2), dim=1)


batch_size = 16
in_channels = 16
out_channels = 64
depth = 32; height = width = 128
kernel_size = 3


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
"""

FEATURES_ONLY = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, in_features))

    def forward(self, x):
        return self.weight @ x


in_features = 4096


def get_inputs():
    return [torch.rand(in_features, in_features)]


def get_init_inputs():
    return [in_features]
"""

HARD_CODED = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(512, 256)

    def forward(self, x):
        return self.linear(x)


def get_inputs():
    return [torch.rand(4096, 512)]


def get_init_inputs():
    return []
"""


GEMM_BATCHNORM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x):
        return self.bn(self.gemm(x))


batch_size = 4096
in_features = 512
out_features = 256


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
"""


def flops_under(limit: float):
    """A budget: the forward's FLOPs (counted on the meta device) at most ``limit``."""
    from torch.utils.flop_counter import FlopCounterMode

    def fits(model, inputs) -> bool:
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            model(*inputs)
        return counter.get_total_flops() <= limit

    return fits


def load(text: str, tmp_path):
    return load_problem(Source(text=text, name="p.py"), tmp_path)


def test_the_batch_shrinks_and_channels_and_kernel_sizes_stay(tmp_path):
    problem = load(CONV_GAP, tmp_path)
    r = reduce_problem(problem, flops_under(2e9))
    assert [(s.name, s.full) for s in r.sizes] == [("batch_size", 128)] and 1 <= r.sizes[0].reduced < 128
    b = r.sizes[0].reduced
    assert r.inputs == [[128, 8, 256, 256]] and r.reduced_inputs == [[b, 8, 256, 256]]
    assert (r.outputs, r.reduced_outputs) == (128 * 64, b * 64)
    assert {k.split(":")[0] for k in r.kept} == {"in_channels", "out_channels", "kernel_size"}
    assert all("get_init_inputs()" in k for k in r.kept)
    assert f"batch_size 128 -> {b}" in r.summary() and f"[128, 8, 256, 256] -> [{b}, 8, 256, 256]" in r.summary()
    with r.applied(problem):  # the model built inside has the full model's parameters, on fewer samples
        assert problem.module.batch_size == b and problem.make_inputs(1, "cpu")[0].shape == (b, 8, 256, 256)
        weights = problem.module.Model(*problem.init_inputs("cpu")).conv.weight.shape
    assert weights == (64, 8, 3, 3) and problem.module.batch_size == 128  # put back after the block


def test_kept_dims_shrink_before_averaged_ones(tmp_path):
    r = reduce_problem(load(CONVT_MEAN, tmp_path), flops_under(3e8))
    sizes = {s.name: s for s in r.sizes}
    assert sizes["batch_size"].reduced == 1 and not sizes["batch_size"].averaged
    assert sizes["height"].reduced < 128 and sizes["width"].reduced < 128  # kept in the output: shrunk next
    assert "depth" not in sizes  # averaged by the mean over dim 2: left whole while the others suffice
    assert r.reduced_inputs[0][:3] == [1, 16, 32]


def test_averaged_dims_shrink_last_and_say_so(tmp_path):
    r = reduce_problem(load(CONV_GAP, tmp_path), flops_under(1e8))  # one sample is still too much
    sizes = {s.name: s for s in r.sizes}
    assert sizes["batch_size"].reduced == 1 and sizes["height"].averaged and sizes["height"].reduced < 256
    assert "shortened a reduction downstream" in r.summary()


def test_a_problem_that_cannot_be_reduced_says_why(tmp_path):
    r = reduce_problem(load(FEATURES_ONLY, tmp_path), flops_under(1e6))
    assert not r.reduced and r.reason.startswith("no size of its inputs may shrink")
    assert "in_features: it changes get_init_inputs()" in r.reason
    small = reduce_problem(load(FEATURES_ONLY, tmp_path), flops_under(1e12))
    assert not small.reduced and small.reason == "it fits the budget at full size"


def test_hard_coded_shapes_are_narrowed_where_the_model_allows(tmp_path):
    problem = load(HARD_CODED, tmp_path)
    r = reduce_problem(problem, flops_under(2 * 256 * 512 * 100))
    assert [s.name for s in r.sizes] == ["inputs size 4096"] and r.reduced_inputs[0][1] == 512
    assert any(k.startswith("inputs size 512") for k in r.kept)  # the Linear's in_features: the forward breaks
    with r.applied(problem):
        x = problem.make_inputs(1, "cpu")[0]
    assert x.shape == (r.sizes[0].reduced, 512) and x.is_contiguous()


def test_the_seed_draws_the_first_rows_of_the_full_inputs(tmp_path):
    """A reduced batch draws the same values the full batch starts with: the sample is the full problem's."""
    problem = load(CONV_GAP.replace("256, 256", "16, 16"), tmp_path)
    full = problem.make_inputs(3, "cpu")[0]
    r = reduce_problem(problem, flops_under(2 * 64 * 8 * 9 * 14 * 14 * 5))
    with r.applied(problem):
        part = problem.make_inputs(3, "cpu")[0]
    assert r.reduced and math.prod(part.shape) < math.prod(full.shape)
    assert torch.equal(part, full[: part.shape[0]])


@pytest.mark.parametrize("text", [CONV_GAP, CONVT_MEAN])
def test_the_module_is_left_as_it_was(text, tmp_path):
    problem = load(text, tmp_path)
    before = {k: v for k, v in vars(problem.module).items() if isinstance(v, int)}
    reduce_problem(problem, flops_under(1e8))
    assert {k: v for k, v in vars(problem.module).items() if isinstance(v, int)} == before


def test_a_batch_whose_samples_mix_keeps_enough_of_them(tmp_path):
    problem = load(GEMM_BATCHNORM, tmp_path)
    budget = flops_under(2 * 512 * 256 * 16)
    r = reduce_problem(problem, budget)
    assert r.batch_shrunk and 2 <= r.reduced_inputs[0][0] <= 16  # a BatchNorm1d needs two samples to build
    with r.applied(problem):
        assert samples_mix(reference_model(problem, "cpu"), problem.make_inputs(1, "cpu"))
    mixed = reduce_problem(problem, budget, batch_mixes=True)
    assert mixed.reduced_inputs == [[MIXED_BATCH_FLOOR, 512]] and mixed.batch_mixes
    assert "still over the budget" in mixed.summary() and f"at least {MIXED_BATCH_FLOOR} kept" in mixed.summary()


def test_independent_samples_do_not_mix(tmp_path):
    problem = load(CONV_GAP.replace("256, 256", "16, 16"), tmp_path)
    assert not samples_mix(reference_model(problem, "cpu"), problem.make_inputs(1, "cpu"))
