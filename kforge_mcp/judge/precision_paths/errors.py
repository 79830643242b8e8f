"""A path's error as a fraction of verify's tolerance, and how its max over a reduced instance scales to the
full problem."""

from __future__ import annotations

import math
from statistics import NormalDist


def error_fractions(expected, got, atol: float | None, rtol: float | None):
    """(got - expected) / (atol + rtol |expected|) at every element of every floating output, in one flat fp64
    tensor (0 where the reference is not finite), each output at the tolerance verify gives its dtype when none is
    set; None when the path is not finite where the reference is."""
    import torch

    from kforge_mcp.judge.correctness import flatten_outputs, tolerance_for

    parts = []
    for e, g in zip(flatten_outputs(expected), flatten_outputs(got), strict=True):
        if not (isinstance(e, torch.Tensor) and e.is_floating_point()) or e.numel() == 0:
            continue
        atol, rtol = tolerance_for(e.dtype, atol, rtol)
        e64, g64 = e.double(), g.double()
        ok = torch.isfinite(e64)
        if bool((~torch.isfinite(g64) & ok).any()):
            return None
        diff = torch.where(ok, g64 - e64, 0.0)
        parts.append(torch.where(diff == 0, 0.0, diff / (atol + rtol * e64.abs())).flatten())  # a zero tolerance: inf
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def _floating(t) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.is_floating_point()


def error_fraction(expected, got, atol: float | None, rtol: float | None) -> float | None:
    """max |got - expected| / (atol + rtol |expected|) over every floating output; None when not finite."""
    f = error_fractions(expected, got, atol, rtol)
    return None if f is None else float(f.abs().max()) if f.numel() else 0.0


def varying_share(a, b) -> float:
    """The share of two input sets' error fractions (``a``, ``b``: the same elements) that changes with the inputs:
    rms(a - b) / sqrt(2) over the rms of both. Near 0 where the error is the same for any input (a weight's
    rounding seen through a mean over many pixels), 1 where the two are independent."""
    total = float(((a * a).mean() + (b * b).mean()) / 2) ** 0.5
    varying = float(((a - b) ** 2).mean() / 2) ** 0.5
    return min(1.0, varying / total) if total > 0 and math.isfinite(total) and math.isfinite(varying) else 1.0


def sample_factor(full: int, reduced: int) -> float:
    """How much larger the max of |error| over ``full`` elements is expected than over ``reduced`` of them: the
    ratio of the medians of the max of that many |normal| draws (x with P(|Z| <= x)^n = 1/2). 1 when none are cut."""
    if reduced <= 0 or full <= reduced:
        return 1.0

    def median_max(n: int) -> float:
        return NormalDist().inv_cdf((1 + 0.5 ** (1 / n)) / 2)

    return median_max(full) / median_max(reduced)
