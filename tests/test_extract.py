"""Code extraction from LLM replies."""

from __future__ import annotations

import pytest

from kforge_mcp.agents.extract import ExtractionError, extract_candidate

MODULE = "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"


def test_one_fenced_block():
    got = extract_candidate(f"Here it is:\n\n```python\n{MODULE}```\n\nThis fuses the ops.")
    assert got.code == MODULE and got.how == "fenced"


def test_several_blocks_pick_the_one_defining_modelnew():
    reply = (
        f"First the kernel idea:\n```python\n@triton.jit\ndef k(x): pass\n```\nThen usage:\n```bash\npip install triton\n```\n"
        f"Full module:\n```py\n{MODULE}```\n"
    )
    got = extract_candidate(reply)
    assert got.code == MODULE and got.how.startswith("fenced (3")


def test_two_modules_the_last_wins():
    old = MODULE.replace("return x", "return x + 1")
    got = extract_candidate(f"```python\n{old}```\nWait, fixed:\n```python\n{MODULE}```")
    assert got.code == MODULE and "last one" in got.notes[0]


def test_untagged_and_tilde_fences():
    assert extract_candidate(f"```\n{MODULE}```").code == MODULE
    assert extract_candidate(f"~~~python\n{MODULE}~~~").code == MODULE


def test_unterminated_fence_is_taken_with_a_note():
    got = extract_candidate(f"```python\n{MODULE}")
    assert got.code == MODULE and got.how == "unterminated fence"


def test_unfenced_code():
    got = extract_candidate(f"Sure! Here is the code.\n\n{MODULE}")
    assert got.code == MODULE and got.how == "unfenced"


def test_fence_inside_a_python_string_does_not_split_the_block():
    body = 'import torch.nn as nn\nDOC = """\nuse ```like this```\n"""\n\nclass ModelNew(nn.Module):\n    pass\n'
    assert "class ModelNew" in extract_candidate(f"```python\n{body}```").code


@pytest.mark.parametrize(
    "reply, message",
    [
        ("", "empty"),
        ("I think you should use shared memory.", "No code block found"),
        ("```python\nclass Model(nn.Module):\n    pass\n```", r"defines class\(es\) Model"),
        ("```python\nModelNew = make()\n```", "mentioned but never defined"),
    ],
)
def test_missing_modelnew_says_precisely_what_is_wrong(reply, message):
    with pytest.raises(ExtractionError, match=message):
        extract_candidate(reply)
