"""The roofline counts a forward's special-function evaluations (exp, log, reciprocals) by op and output size: what
a fused epilogue spends on the unit that also converts types."""

from __future__ import annotations

import torch

from kforge_mcp.judge.roofline import count_reference


class Tail(torch.nn.Module):
    def forward(self, x, y):
        a = torch.tanh(x)  # 2 each: exp and a division
        b = torch.softmax(a, dim=1)  # 2 each
        c = b / y  # 1 each: a tensor divisor
        d = c / 3.0  # none: a scalar divisor is a multiply
        return torch.nn.functional.mish(d).relu()  # mish 4 each, relu none


def test_special_functions_are_counted_per_output_element():
    x, y = torch.randn(4, 8, device="meta"), torch.randn(4, 8, device="meta")
    counts = count_reference(Tail(), [x, y])
    assert counts.special_functions == (2 + 2 + 1 + 4) * 32


def test_a_forward_without_them_counts_none():
    model = torch.nn.Linear(8, 8).to("meta")
    assert count_reference(model, [torch.randn(2, 8, device="meta")]).special_functions == 0
