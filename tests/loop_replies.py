"""Scripted generation-agent replies for the loop tests, on tests/cheats/problem.py (a small softmax):
the first does not compile, the second is wrong, the third is right, the fourth is the same
kernel with a larger block."""

from pathlib import Path

PROBLEM = str(Path(__file__).resolve().parent / "cheats" / "problem.py")

HEADER = """import torch
import torch.nn as nn
import triton
import triton.language as tl

"""

KERNEL = """@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0)SCALE, mask=cols < n_cols)

"""

MODEL = """class ModelNew(nn.Module):
    def forward(self, x)COLON
        x = x.contiguous()
        out = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1])WIDER)
        return out
"""


def module(colon=":", scale="", wider=""):
    return HEADER + KERNEL.replace("SCALE", scale) + MODEL.replace("COLON", colon).replace("WIDER", wider)


SYNTAX_ERROR = module(colon="")
WRONG = module(scale=" * 2.0")
RIGHT = module()
FASTER = module(wider=" * 2")
SYNTAX_ERROR_LINE = SYNTAX_ERROR.splitlines().index("    def forward(self, x)") + 1

REPLIES = [
    f"Here is a first version.\n\n```python\n{SYNTAX_ERROR}```\n",
    f"Fixed the syntax.\n\n```python\n{WRONG}```\n",
    f"The scale was wrong; removed it.\n\n```python\n{RIGHT}```\n",
    f"A wider block.\n\n```python\n{FASTER}```\n",
]
