"""An epilogue's logarithms: where the reference takes a log of every element (mish, softplus, log, ...) and the
kernel's PTX computes it with libdevice's polynomial (25-40 instructions an element, what tl.log and tl.log2 compile
to), those instructions can fill the issue slots of a fused convolution or GEMM: a transposed convolution with a mish
epilogue (KernelBench Level 2's ConvTranspose2d_Mish_Add_Hardtanh_Scaling) issued 96 instructions per output on an
H100, about half of them its mish. Mish needs no log (tanh(softplus(x)) = n / (n + 2) with
n = e^x (e^x + 2)), and the hardware's log2 (lg2.approx) is one instruction: log(x) through it came within 5.1e-7
of the exact one over [1, 31] on an H100 (bench/epilogue_math.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from kforge_mcp.advice import vocabulary
from kforge_mcp.advice.rules.base import (
    DEVICE_KERNELS,
    ISSUE_SLOTS,
    WARP_SIZE,
    Need,
    Rule,
    Wording,
    ev,
    hot_kernels,
    pct,
    recommendation,
)
from kforge_mcp.profiling.report import ProfileReport, Recommendation

# PTX instructions an element saves, the form people write less the cheap one (bench/epilogue_math.py, for sm_90:
# mish 49.9 / 51.1 -> 10.0 through tanh-by-exp and log, softplus 38.8 / 39.9 -> 7.0, log 29.2 / 34.8 -> 4.0 with
# Triton 3.9 / 3.6; the lower of the two). The cheap forms stayed within 0.002 of an fp32 verdict's 1e-4 tolerance
# on an H100.
SAVED_PER_ELEMENT = {
    "mish": 40.0,
    "softplus": 32.0,
    "log_sigmoid_forward": 32.0,  # -softplus(-x)
    "log": 25.0,
    "log1p": 25.0,
    "log2": 25.0,
    "log10": 25.0,
}
PTX_LOGS = Need(
    "how many software logs each kernel's compiled code holds (its PTX)",
    "profile a Triton candidate on an NVIDIA GPU: the profile reads its kernels' PTX",
    lambda r: (
        bool(vocabulary.of(r).polynomial_log_metric)
        and any(vocabulary.of(r).polynomial_log_metric in k.metrics for k in r.device_kernels())
    ),
)


@dataclass(frozen=True)
class EpilogueThresholds:
    min_instruction_share: float = 0.1  # the logs' instructions under a tenth of the kernel's: not worth a rewrite
    max_instruction_share: float = 0.8  # a kernel keeps its loads, products and stores whatever its epilogue does
    memory_bound_pct: float = 60.0  # memory this busy sets the kernel's time: fewer instructions do not shorten it


EPILOGUE = EpilogueThresholds()

WORDING = Wording(
    "Compute the epilogue without the polynomial log: mish(x) = x * n / (n + 2) with n = e^x (e^x + 2) (one exp "
    "and one division an element; mish(x) = x past x = 20, where e^2x overflows fp32); softplus(x) = max(x, 0) + "
    "log2(1 + 2^(-|x| log2(e))) * ln 2 and log(x) = log2(x) * ln 2 with the hardware's log2 (lg2.approx.f32: one "
    "instruction, within 6e-7 of the exact log over [1, 31] on an H100; in CUDA C++ __log2f, or __logf). Keep the "
    "rest of the kernel as it is.",
    {
        "triton": "Compute the epilogue without the polynomial log that tl.log and tl.log2 compile to: mish(x) = x * n "
        "/ (n + 2) with e = tl.exp(tl.minimum(x, 20.0)), n = e * (e + 2.0), and tl.where(x > 20.0, x, ...) (one exp "
        "and one division an element; e^2x overflows fp32 past 44); softplus(x) = tl.maximum(x, 0.0) + lg2(1.0 + "
        "tl.exp2(-1.4426950408889634 * tl.abs(x))) * 0.6931471805599453 and log(x) = lg2(x) * 0.6931471805599453, "
        "with the hardware's log2, lg2(v) = tl.inline_asm_elementwise('lg2.approx.f32 $0, $1;', '=r,r', [v], "
        "dtype=tl.float32, is_pure=True, pack=1) (one instruction, within 6e-7 of the exact log over [1, 31] on an "
        "H100). Keep the rest of the kernel as it is.",
        "cuda": "Compute the epilogue without the polynomial logf: mish(x) = x * n / (n + 2) with e = __expf(fminf(x, "
        "20.f)), n = e * (e + 2.f), and x itself past 20 (one exp and one division an element); softplus(x) = "
        "fmaxf(x, 0.f) + __log2f(1.f + exp2f(-1.4426950f * fabsf(x))) * 0.6931472f and log(x) = __logf(x) (the "
        "hardware's lg2.approx: one instruction, within 6e-7 of the exact log over [1, 31] on an H100). Keep the "
        "rest of the kernel as it is.",
    },
)


def _ops_text(logs: dict[str, float]) -> str:
    return ", ".join(f"{op.removesuffix('_forward')} ({n:.3g} elements)" for op, n in logs.items())


def _epilogue_logs(report: ProfileReport, t: EpilogueThresholds) -> list[Recommendation]:
    r = report.roofline
    logs = {op: n for op, n in (r.logs_by_op if r is not None else {}).items() if op in SAVED_PER_ELEMENT and n > 0}
    if not logs:
        return []
    v = vocabulary.of(report)
    saved = sum(n * SAVED_PER_ELEMENT[op] for op, n in logs.items()) / v.warp_size  # warp instructions a forward
    left, gain, hits, evidence = saved, 0.0, [], []
    metric = v.polynomial_log_metric
    with_logs = [  # each kernel still inlining the polynomial, with its warp instructions a forward
        (k, share, (k.instructions or 0.0) * (k.launches_per_forward or 1.0))
        for k, share in hot_kernels(report)
        if k.metrics.get(metric, 0) > 0 and k.instructions
    ]
    for k, share, issued in sorted(with_logs, key=lambda kse: -kse[2]):
        take = min(left, t.max_instruction_share * issued)
        memory = max(k.memory_throughput_pct or 0.0, k.dram_throughput_pct or 0.0)
        if take < t.min_instruction_share * issued or k.issue_active_pct is None or memory >= t.memory_bound_pct:
            continue
        left -= take
        gain += share * k.issue_active_pct / 100 * take / issued
        hits.append(k.name)
        evidence += [
            ev("issue slots busy", pct(k.issue_active_pct), "the instructions the logs add are the time", k.name),
            ev("warp instructions a forward", f"{issued:.3g}", kernel=k.name),
            ev("of them, the logs' polynomial (estimated)", pct(100 * take / issued), "", k.name),
            ev(
                "polynomial logs in the kernel's PTX",
                int(k.metrics[metric]),
                "0 once computed cheaply",
                k.name,
            ),
        ]
    if not hits:
        return []
    evidence.append(ev("the reference's ops that take a log of each element", _ops_text(logs)))
    title = (
        "Compute mish without a log: one exp and one division an element"
        if set(logs) == {"mish"}
        else "Take the polynomial log out of the epilogue: mish by one exp, logs by the hardware's log2"
    )
    return [
        recommendation(
            rule="epilogue_logs",
            title=title,
            evidence=evidence,
            action=WORDING.say(report.target),
            expected_gain=gain,
            gain_basis=f"share x issue slots busy x the instructions saved / the kernel's: {_ops_text(logs)}, each "
            "saving the PTX instructions of libdevice's polynomial log and the forms around it over the cheap form "
            "(mish 40, softplus 32, log 25: bench/epilogue_math.py, Triton for sm_90), at most "
            f"{t.max_instruction_share:.0%} of the kernel's; only the busy issue slots shrink",
            kernels=hits,
            change="compute the epilogue without the polynomial log",
        )
    ]


epilogue_logs = Rule(
    "epilogue_logs", _epilogue_logs, EPILOGUE, (DEVICE_KERNELS, ISSUE_SLOTS, PTX_LOGS), terms=(WARP_SIZE,)
)
