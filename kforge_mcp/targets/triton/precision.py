"""tl.dot's input precision in Triton's CPU interpreter, as an NVIDIA GPU computes it.

The interpreter multiplies fp32 operands in full fp32 (np.matmul) whatever ``input_precision``
says, so a single-pass TF32 GEMM passes at fp32's 1e-4 on the CPU and fails on the GPU. While a
verify runs under the interpreter, ``emulated_dot`` wraps the interpreter's dot and rounds fp32
operands first, as the tensor cores see them:

- ``tf32`` (Triton's default for fp32 operands on NVIDIA): one product of TF32 operands. The MMA
  reads fp32 registers as TF32 and ignores their low 13 mantissa bits (``TF32_ROUNDING``).
- ``tf32x3``: Triton's split, big = cvt.rna.tf32(x), small = x - big (as TF32), and
  big*small + small*big + big*big, each product of TF32 operands accumulated in fp32.
- ``bf16x3`` / ``bf16x6``: the interpreter refuses them (its allowed precisions are tf32,
  tf32x3 and ieee), so such a kernel is an error on the CPU.
- ``ieee`` and fp16 operands: the interpreter is already exact (products of 16-bit values are
  exact in fp32). bf16 operands: the interpreter keeps them as raw 16-bit integers and multiplies
  those; they are widened to fp32 first (exact, as the tensor cores' products are). The rest of its
  bf16 arithmetic, and its fp32 -> bf16 conversion, are put right by ``interpreter_bf16``.

fp32 accumulation order still differs from the GPU's, by far less than any tolerance we judge at.
"""

from __future__ import annotations

import contextlib

from kforge_mcp.core.schemas import Finding

TF32_ROUNDING = "truncate"  # how a single-pass TF32 MMA reads fp32 operands: 'truncate' or 'nearest'
_TF32_DROP = 13  # fp32 keeps 23 mantissa bits, TF32 10


def _round(x, drop: int, mode: str):
    """fp32 array with its low ``drop`` mantissa bits rounded away: 'truncate' (toward zero) or
    'nearest' (ties away from zero, as cvt.rna). NaN and Inf stay what they are."""
    import numpy as np

    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    if mode == "nearest":
        bits = bits + np.uint32(1 << (drop - 1))
    out = (bits & np.uint32((0xFFFFFFFF >> drop) << drop)).view(np.float32)
    return np.where(np.isfinite(x), out, x)


def tf32(x, mode: str = TF32_ROUNDING):
    return _round(x, _TF32_DROP, mode)


def _split(x, parts: int, rounder):
    """x as a sum of ``parts`` terms, each exactly representable in the narrow type."""
    out, rest = [], x
    for _ in range(parts):
        part = rounder(rest)
        out.append(part)
        rest = (rest - part).astype(rest.dtype)
    return out


def emulated_product(a, b, precision: str):
    """a @ b (fp32 numpy arrays) as the GPU computes it at ``precision`` (the enum's name)."""
    import numpy as np

    def mm(x, y):
        return np.matmul(x, y, dtype=np.float32)

    if precision == "TF32":
        return mm(tf32(a), tf32(b))
    if precision == "TF32x3":
        (ab, as_), (bb, bs) = _split(a, 2, lambda v: tf32(v, "nearest")), _split(b, 2, lambda v: tf32(v, "nearest"))
        return mm(ab, bs) + mm(as_, bb) + mm(ab, bb)
    return mm(a, b)


class DotEmulation:
    """Counts the dots it rounded, by input precision, for the report."""

    def __init__(self):
        self.counts: dict[str, int] = {}

    def findings(self) -> list[Finding]:
        if not self.counts:
            return []
        names = ", ".join(f"{k.lower()} x{v}" for k, v in sorted(self.counts.items()))
        return [
            Finding(
                code="dot_precision_emulated",
                severity="info",
                evidence={"dots": {k.lower(): v for k, v in self.counts.items()}, "tf32_rounding": TF32_ROUNDING},
                message=f"tl.dot ran with the operand rounding of an NVIDIA GPU ({names}), "
                "not the interpreter's own arithmetic",
            )
        ]


@contextlib.contextmanager
def emulated_dot():
    """Wrap the interpreter's dot, and make its bf16 arithmetic exact, for as long as the context is open."""
    import numpy as np
    from triton.runtime import interpreter

    from kforge_mcp.targets.triton.interpreter_bf16 import bf16_values, is_raw_bf16, widen

    builder = interpreter.InterpreterBuilder
    real = builder.create_dot
    state = DotEmulation()

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        name = getattr(input_precision, "name", str(input_precision)).split(".")[-1]
        if is_raw_bf16(a) and is_raw_bf16(b) and d.data.dtype == np.float32:
            # the interpreter would multiply the bit patterns (triton-lang/triton#11584): widen them (exact)
            state.counts["BF16"] = state.counts.get("BF16", 0) + 1
            product = np.matmul(widen(a).data, widen(b).data, dtype=np.float32)
            return interpreter.TensorHandle(product + d.data, d.dtype.scalar)
        fp32 = a.data.dtype == np.float32 and b.data.dtype == np.float32
        if not fp32 or name == "IEEE":
            return real(self, a, b, d, input_precision, max_num_imprecise_acc)
        state.counts[name] = state.counts.get(name, 0) + 1
        product = emulated_product(a.data, b.data, name)
        return interpreter.TensorHandle((product + d.data).astype(d.data.dtype), d.dtype.scalar)

    builder.create_dot = create_dot
    try:
        with bf16_values():
            yield state
    finally:
        builder.create_dot = real
