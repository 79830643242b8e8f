"""What an epilogue's special functions cost a Triton kernel, in the forms people write and in cheap exact ones.

Each form is compiled for sm_90 in an elementwise kernel (1024 elements a program, 4 warps); its cost is the PTX
instructions per element over those of a kernel that copies (no GPU needed: Triton compiles for sm_90 on any host).
Where a CUDA device is present each form also runs on 2^24 values spread over [-30, 30] against torch in fp64: its
largest absolute error, and its largest error as a fraction of an fp32 verdict's tolerance (atol + rtol |exact|, both
1e-4). The advice (kforge_mcp/advice/rules/epilogue.py) prices a polynomial log against its cheap form with these
counts.

    python bench/epilogue_math.py [--out bench/results/epilogue-math/DEVICE.md]
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

ROOT = Path(__file__).resolve().parents[1]
LOG2E, LN2 = tl.constexpr(1.4426950408889634), tl.constexpr(0.6931471805599453)


@triton.jit
def _tanh_by_exp(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def _lg2_approx(x):  # the hardware's log2 (PTX lg2.approx.f32): one instruction; its error is measured below
    return tl.inline_asm_elementwise("lg2.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def mish_usual(x):
    return x * _tanh_by_exp(tl.maximum(x, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(x))))


@triton.jit
def mish_libdevice(x):
    return x * libdevice.tanh(libdevice.log1p(tl.exp(x)))


@triton.jit
def mish_identity(x):  # tanh(softplus(x)) = n / (n + 2), n = e^x (e^x + 2); mish(x) = x past 20 in fp32
    e = tl.exp(tl.minimum(x, 20.0))
    n = e * (e + 2.0)
    return tl.where(x > 20.0, x, x * (n / (n + 2.0)))


@triton.jit
def softplus_usual(x):
    return tl.maximum(x, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(x)))


@triton.jit
def softplus_lg2(x):
    return tl.maximum(x, 0.0) + _lg2_approx(1.0 + tl.exp2(-LOG2E * tl.abs(x))) * LN2


@triton.jit
def log_usual(x):
    return tl.log(tl.abs(x) + 1.0)


@triton.jit
def log_lg2(x):
    return _lg2_approx(tl.abs(x) + 1.0) * LN2


@triton.jit
def tanh_by_exp(x):
    return _tanh_by_exp(x)


@triton.jit
def tanh_libdevice(x):
    return libdevice.tanh(x)


@triton.jit
def tanh_one_exp(x):  # 1 - 2 / (e^2x + 1): no branch, no abs
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)


@triton.jit
def sigmoid_tl(x):
    return tl.sigmoid(x)


@triton.jit
def gelu_erf(x):
    return 0.5 * x * (1.0 + libdevice.erf(x * 0.7071067811865476))


@triton.jit
def copy(x):
    return x


FORMS = {  # op -> (form, the reference in fp64)
    "mish": (
        [mish_usual, mish_libdevice, mish_identity],
        lambda x: x * torch.tanh(torch.nn.functional.softplus(x)),
    ),
    "softplus": ([softplus_usual, softplus_lg2], torch.nn.functional.softplus),
    "log": ([log_usual, log_lg2], lambda x: torch.log(x.abs() + 1.0)),
    "tanh": ([tanh_by_exp, tanh_libdevice, tanh_one_exp], torch.tanh),
    "sigmoid": ([sigmoid_tl], torch.sigmoid),
    "gelu": ([gelu_erf], lambda x: torch.nn.functional.gelu(x)),
}


def _kernel(fn):
    @triton.jit
    def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = o < n
        tl.store(y_ptr + o, fn(tl.load(x_ptr + o, mask=m)), mask=m)

    return k


BLOCK, WARPS = 1024, 4


def ptx_cost(fn) -> tuple[int, collections.Counter]:
    """PTX instructions of fn's elementwise kernel compiled for sm_90, and the count of each opcode."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(
        fn=_kernel(fn),
        signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        constexprs={"BLOCK": BLOCK},
    )
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": WARPS}).asm["ptx"]
    lines = [s.strip() for s in ptx.splitlines()]
    body = [s for s in lines if re.match(r"@?%?[a-z]", s) and not s.startswith(("//", "."))]
    ops = collections.Counter(s.split()[1] if s.startswith("@") else s.split()[0] for s in body)
    return len(body), ops


def errors(fn, reference) -> tuple[float, float]:
    """Largest absolute error of fn over 2^24 values in [-30, 30] against fp64 on the GPU, and the largest as a
    fraction of atol + rtol |exact| (1e-4 each: an fp32 verdict's tolerance)."""
    x = torch.linspace(-30.0, 30.0, 1 << 24, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    _kernel(fn)[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK, num_warps=WARPS)
    ref = reference(x.double())
    err = (y.double() - ref).abs()
    return float(err.max()), float((err / (1e-4 + 1e-4 * ref.abs())).max())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="write the table here as markdown")
    args = ap.parse_args(argv)
    per_thread = BLOCK // (WARPS * 32)
    base, _ = ptx_cost(copy)
    gpu = torch.cuda.is_available()
    where = torch.cuda.get_device_name() if gpu else "no GPU: errors not measured"
    rows = [
        f"Triton {triton.__version__}, PTX for sm_90; errors on {where}.",
        "",
        "| op | form | PTX instructions per element | largest abs error | of the 1e-4 tolerance | notable opcodes |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for op, (forms, reference) in FORMS.items():
        for fn in forms:
            n, ops = ptx_cost(fn)
            per = (n - base) / per_thread
            abs_err, rel_err = errors(fn, reference) if gpu else (float("nan"), float("nan"))
            notable = ", ".join(
                f"{o} {c // per_thread}" for o, c in ops.most_common() if re.match(r"(ex2|lg2|rcp|div|fma)", o)
            )
            rows.append(f"| {op} | `{fn.__name__}` | {per:.1f} | {abs_err:.2g} | {rel_err:.2g} | {notable} |")
    text = "\n".join(rows) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
