"""bf16 in Triton's CPU interpreter computed on values, not on bit patterns.

The interpreter stores a bfloat16 as the raw uint16 bits of the value and hands those to numpy, so
``tl.dot`` multiplies bit patterns (triton-lang/triton#11584, declined upstream as unsupported), and so
do +, -, *, min/max, comparisons, fma, clamp, sums, scans and casts to and from integers: an honest
bf16 kernel gets NaNs or values near 1e38 on the CPU. While ``bf16_values`` is open, each of those
ops widens its bf16 operands to fp32 (exact: a bf16 is the top half of an fp32), runs the
interpreter's own op, and rounds a bf16 result to nearest even, as the GPU rounds. The interpreter's
own fp32 -> bf16 conversion truncates; it is replaced by the same rounding.

Reductions and scans of bf16 values accumulate in fp32 and round once (the GPU rounds each step to
bf16), so they come out slightly more accurate than on a GPU. Only handles kept as uint16 bits are
touched: a Triton that stores bf16 otherwise is left to itself.
"""

from __future__ import annotations

import contextlib


def is_raw_bf16(handle) -> bool:
    """A bf16 TensorHandle whose data are the uint16 bit patterns (the interpreter's storage)."""
    import numpy as np
    import triton.language as tl

    return handle.dtype.scalar == tl.bfloat16 and handle.data.dtype == np.uint16


def widen(handle):
    """An fp32 TensorHandle with the values of a raw bf16 one (exact); any other handle unchanged."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    if not is_raw_bf16(handle):
        return handle
    data = (np.ascontiguousarray(handle.data).astype(np.uint32) << 16).view(np.float32)
    return TensorHandle(data, tl.float32)


def narrow_bits(data):
    """fp32 values as bf16 bit patterns (uint16), rounded to nearest even; NaN stays NaN."""
    import numpy as np

    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    quiet_nan = (bits >> np.uint32(16)) | np.uint32(0x0040)
    return np.where(np.isnan(data), quiet_nan, rounded).astype(np.uint16)


def _narrow(handle):
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    return TensorHandle(narrow_bits(handle.data), tl.bfloat16)


def _tensor(t, handle):
    """A tl.tensor of ``handle``, typed by its element type (same shape as ``t``)."""
    import triton.language as tl

    scalar = handle.dtype.scalar
    return tl.core.tensor(handle, t.type.with_element_ty(scalar) if t.type.is_block() else scalar)


@contextlib.contextmanager
def bf16_values():
    """Make the interpreter's elementwise ops, casts, reductions and scans treat bf16 as values."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import InterpreterBuilder, ReduceOps, ScanOps, TensorHandle

    def result(out, like):
        """The interpreter's result of an op widened from ``like``'s bf16: back to bf16 where it is a float."""
        if out.data.dtype == np.float32 and is_raw_bf16(like):
            return _narrow(out)
        # a comparison's bools: labelled int1, not bf16, so a later cast reads them as bools, not as bits
        return TensorHandle(out.data, tl.int1 if out.data.dtype == np.bool_ else like.dtype.scalar)

    real = {
        name: getattr(InterpreterBuilder, name)
        for name in ("binary_op", "unary_op", "ternary_op", "create_fma", "cast_impl")
    }
    real_reduce, real_scan = ReduceOps.apply_impl, ScanOps.apply_impl

    def binary_op(self, lhs, rhs, op):
        if not (is_raw_bf16(lhs) or is_raw_bf16(rhs)):
            return real["binary_op"](self, lhs, rhs, op)
        return result(real["binary_op"](self, widen(lhs), widen(rhs), op), lhs)

    def unary_op(self, arg, op):
        if not is_raw_bf16(arg):
            return real["unary_op"](self, arg, op)
        return result(real["unary_op"](self, widen(arg), op), arg)

    def ternary_op(self, a, b, c, op):  # select (bits would do) and clamp (they would not)
        if not any(map(is_raw_bf16, (a, b, c))):
            return real["ternary_op"](self, a, b, c, op)
        return result(real["ternary_op"](self, widen(a), widen(b), widen(c), op), c)

    def create_fma(self, x, y, z):
        if not any(map(is_raw_bf16, (x, y, z))):
            return real["create_fma"](self, x, y, z)
        return result(real["create_fma"](self, widen(x), widen(y), widen(z)), z)

    def cast_impl(self, src, dst_type):
        cast = real["cast_impl"]
        to_bf16 = dst_type.scalar == tl.bfloat16
        if is_raw_bf16(src) and not to_bf16:  # to an integer, fp64, ...: from the value
            return cast(self, widen(src), dst_type)
        if to_bf16 and src.dtype.scalar != tl.bfloat16:  # from fp32 (truncated there), an integer, ...
            wide = src if src.dtype.scalar == tl.float32 else cast(self, src, tl.float32)
            return _narrow(wide)
        return cast(self, src, dst_type)

    def widened(real_apply):
        def apply_impl(self, input):
            raw = [is_raw_bf16(t.handle) for t in input]
            if not any(raw):
                return real_apply(self, input)
            out = real_apply(self, tuple(_tensor(t, widen(t.handle)) for t in input))
            out = out if isinstance(out, (list, tuple)) else (out,)
            # outputs match inputs by position; an argmin/argmax's index comes after its values
            return [
                _tensor(o, _narrow(o.handle)) if i < len(raw) and raw[i] and o.handle.data.dtype == np.float32 else o
                for i, o in enumerate(out)
            ]

        return apply_impl

    patched = {
        "binary_op": binary_op,
        "unary_op": unary_op,
        "ternary_op": ternary_op,
        "create_fma": create_fma,
        "cast_impl": cast_impl,
    }
    for name, fn in patched.items():
        setattr(InterpreterBuilder, name, fn)
    ReduceOps.apply_impl, ScanOps.apply_impl = widened(real_reduce), widened(real_scan)
    try:
        yield
    finally:
        for name, fn in real.items():
            setattr(InterpreterBuilder, name, fn)
        ReduceOps.apply_impl, ScanOps.apply_impl = real_reduce, real_scan
