"""Compute paths measured on the problem. The reference runs on the CPU with its matrix products and
convolutions done the way each path does them (operands rounded to the path's format, or split into
parts whose products are summed in fp32, as a tensor core accumulates), on the problem's own inputs.
Each path's max error, as a fraction of the tolerance verify applies (|a - b| <= atol + rtol |b|),
says whether a kernel on that path can pass. This measures numerics, not speed: the rate of a path is
its format's peak over its number of products (roofline/paths.py). The bound uses the fastest path whose
max error stays within MARGIN of the tolerance.

Splits: x = hi + lo with hi = round(x), lo = round(x - hi) (and a third part for bf16x6).
bf16x3 sums hi*hi + hi*lo + lo*hi, 3xtf32 the same in TF32 (CUTLASS's 3xTF32), bf16x6 splits in
three (hi + mid + lo) and sums hi*hi, hi*mid, mid*hi, mid*mid, hi*lo and lo*hi (Triton's
input_precision='bf16x6'); bf16x2 and fp16x2
split one operand only (hi*b + lo*b, after Markidis et al.'s refinement of one side), the one whose
rounding loses more. fp8 is e4m3 with a power-of-two per-tensor scale. fp32 is the FMA pipe: each
product computed in fp64 and rounded once to fp32, an ideal fp32 kernel.

Bounded memory and time: the reference runs on a reduced instance of the problem (core/reduced.py: the batch,
then the spatial sizes shrunk, channels, features and kernels kept) planned to take PLAN_S at CPU_RATES and
MEMORY_BYTES of intermediates, and measuring stops at the budget (BUDGET_S): the paths left are reported as not
measured, fastest first so the ones left matter least. The max over fewer elements is smaller: each path's max is
scaled up by sample_factor(full, reduced), the ratio of the medians of the max of that many |normal| draws, times
the share of its error that varies between two input sets (varying_share: a weight's rounding seen through a
mean over many pixels is the same for every sample, and more samples do not raise its max).
"""

from kforge_mcp.judge.precision_paths.cost import PeakRSS, plan
from kforge_mcp.judge.precision_paths.emulation import (
    PATH_SPECS,
    PATHS_FOR,
    PathSpec,
    Splits,
    emulate_product,
    paths_for,
    round_to,
    split,
)
from kforge_mcp.judge.precision_paths.errors import error_fraction, sample_factor, varying_share
from kforge_mcp.judge.precision_paths.measurement import MARGIN, SEEDS, MeasuredPaths, code_digest, measure_reference

__all__ = [
    "MARGIN",
    "PATHS_FOR",
    "PATH_SPECS",
    "SEEDS",
    "MeasuredPaths",
    "PathSpec",
    "PeakRSS",
    "Splits",
    "code_digest",
    "emulate_product",
    "error_fraction",
    "measure_reference",
    "paths_for",
    "plan",
    "round_to",
    "sample_factor",
    "split",
    "varying_share",
]
