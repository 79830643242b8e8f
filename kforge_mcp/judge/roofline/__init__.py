"""Speed of light for a reference forward: FLOPs from torch's FlopCounterMode, minimum bytes
(inputs and parameters read once, outputs written once), and the device's peaks (each platform's
table: kforge_mcp/platforms/<vendor>/peaks.toml).

T_SOL = max(flops / peak_flops(path), bytes / peak_bandwidth), where the path is the fastest way
to do the math that still meets the problem's tolerance. With a problem, each path (fp8, fp16,
bf16, tf32, the splits bf16x2/x3/x6, fp16x2, 3xTF32, fp32 FMA) is measured on its own inputs
(precision_paths.py) and the bound takes the fastest whose max error stays within a margin of the
tolerance: an fp32 GEMM at 1e-4 typically passes as bf16x3 (three bf16 MMAs, twice 3xTF32's
rate). Without one, a path is judged by its operands' rounding. A correct kernel that beats the
bound shows the model wrong: the bound is corrected (corrected_bound: a faster path or a lever of the
reference's structure, then the memory floor, the output write) and said so, and the fraction is taken
against it, never over 1.

A convolution is priced as the implicit GEMM a tensor-core kernel runs: its N and K padded up to the
path's MMA shapes (conv_gemm), in the form (a row per output or per input pixel) that pads least.

FlopCounterMode counts matmul, convolution and attention FLOPs only: element-wise ops and
reductions count 0, so such problems come out memory-bound (they nearly always are).
"""

from kforge_mcp.judge.roofline.bound import (
    PLACEHOLDER_NOTE,
    bound_text,
    corrected_bound,
    from_measured,
    lever_sol_ms,
    make_roofline,
    output_floor,
    placeholder_peaks,
    reference_roofline,
    set_verify_bound,
    with_lever,
    with_measured,
)
from kforge_mcp.judge.roofline.conv import (
    compute_flops,
    conv_gemm,
    conv_label,
    conv_shape,
    input_pass_bytes,
    mma_granules,
    problem_kind,
)
from kforge_mcp.judge.roofline.counting import Counts, convolution, count_problem, count_reference, meta_reference
from kforge_mcp.judge.roofline.paths import (
    MEASURED_ONLY,
    UNIT_ROUNDOFF,
    compute_paths,
    dtype_bytes,
    dtype_key,
    fastest,
    path_choice,
    path_peak,
    path_tolerance,
)
from kforge_mcp.platforms import lookup_peaks, table_device
from kforge_mcp.platforms.base import Peaks

__all__ = [
    "MEASURED_ONLY",
    "PLACEHOLDER_NOTE",
    "UNIT_ROUNDOFF",
    "Counts",
    "Peaks",
    "bound_text",
    "compute_flops",
    "compute_paths",
    "conv_gemm",
    "conv_label",
    "conv_shape",
    "convolution",
    "corrected_bound",
    "count_problem",
    "count_reference",
    "dtype_bytes",
    "input_pass_bytes",
    "dtype_key",
    "fastest",
    "from_measured",
    "lever_sol_ms",
    "lookup_peaks",
    "make_roofline",
    "meta_reference",
    "mma_granules",
    "output_floor",
    "path_choice",
    "path_peak",
    "path_tolerance",
    "placeholder_peaks",
    "problem_kind",
    "reference_roofline",
    "set_verify_bound",
    "table_device",
    "with_lever",
    "with_measured",
]
