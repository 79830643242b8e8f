"""The generation agent's prompt templates."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT
from loop_replies import PROBLEM

from kforge_mcp.agents import prompts
from kforge_mcp.core.errors import InputError

PROBLEM_TEXT = Path(PROBLEM).read_text()


@pytest.mark.parametrize("target", ["triton", "cuda", "cute", "metal"])
@pytest.mark.parametrize("kind", ["first", "repair", "optimize"])
def test_every_template_renders_the_problem_rules_one_shot_and_format(target, kind):
    text = prompts.render(
        kind,
        target,
        PROBLEM_TEXT,
        previous="OLD_CODE",
        feedback="FEEDBACK_LINE",
        attempt_index=1,
        speedup=1.25,
        device="DEVICE_FACTS",
    )
    assert "return torch.softmax(x, dim=-1)" in text and "DEVICE_FACTS" in text
    assert "Forbidden" in text and "one fenced ```python" in text and "class ModelNew" in text
    shot = (ROOT / "examples" / "candidates" / "fused_bias_gelu" / f"{target}.py").read_text().strip()
    assert shot in text  # the shipped example (prompts/<target>/one_shot.py links to it)
    if kind != "first":
        assert "OLD_CODE" in text and "FEEDBACK_LINE" in text
    if kind == "optimize":
        assert "1.25x" in text
    if target == "cuda":
        assert "load_inline" in text
    if target == "metal":
        assert "torch.mps.compile_shader" in text and "constant long&" in text
    if target == "cute":
        assert "@cute.kernel" in text and "cute.compile" in text and "from_dlpack" in text


def test_cross_target_reference_and_unknown_target():
    text = prompts.render("first", "cuda", PROBLEM_TEXT, reference_impl="TRITON_IMPL", reference_target="triton")
    assert "for another target (triton)" in text and "TRITON_IMPL" in text
    with pytest.raises(InputError, match="no prompt templates for target 'rocm'"):
        prompts.render("first", "rocm", PROBLEM_TEXT)
    assert {"triton", "cuda", "cute", "metal"} <= set(prompts.targets_with_prompts())
