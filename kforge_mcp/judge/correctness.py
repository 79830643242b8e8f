"""Compare a candidate's outputs with the reference's: structure, shape, dtype, finiteness,
then closeness with per-dtype tolerances. A failure says where and by how much."""

from __future__ import annotations

from kforge_mcp.core.options import default_tolerance
from kforge_mcp.core.schemas import Finding, Mismatch


def tolerance_for(dtype, atol: float | None, rtol: float | None) -> tuple[float, float]:
    default = default_tolerance(dtype)
    return (default if atol is None else atol, default if rtol is None else rtol)


def flatten_outputs(value) -> list:
    if isinstance(value, (list, tuple)):
        return [item for v in value for item in flatten_outputs(v)]
    return [value]


def compare_outputs(expected, got, trial: int, atol: float | None, rtol: float | None) -> Mismatch | None:
    import torch

    exp_list, got_list = flatten_outputs(expected), flatten_outputs(got)
    if len(exp_list) != len(got_list):
        return Mismatch(
            trial=trial, reason=f"the reference returns {len(exp_list)} outputs, the candidate {len(got_list)}"
        )
    for i, (e, g) in enumerate(zip(exp_list, got_list)):
        if not isinstance(e, torch.Tensor):
            if e != g:
                return Mismatch(
                    trial=trial, output_index=i, reason=f"non-tensor output differs: expected {e!r}, got {g!r}"
                )
            continue
        if not isinstance(g, torch.Tensor):
            return Mismatch(trial=trial, output_index=i, reason=f"expected a tensor, got {type(g).__name__}")
        if tuple(e.shape) != tuple(g.shape):
            return Mismatch(
                trial=trial, output_index=i, reason=f"shape: expected {tuple(e.shape)}, got {tuple(g.shape)}"
            )
        if e.dtype != g.dtype:
            return Mismatch(trial=trial, output_index=i, reason=f"dtype: expected {e.dtype}, got {g.dtype}")
        mismatch = _compare_values(e, g, trial, i, *tolerance_for(e.dtype, atol, rtol))
        if mismatch is not None:
            return mismatch
    return None


def _compare_values(expected, got, trial: int, index: int, atol: float, rtol: float) -> Mismatch | None:
    import torch

    # compare where the reference lives: a GPU-sized output must not cost host memory
    e = expected.detach().to(torch.float64)
    g = got.detach().to(e.device, torch.float64)
    if e.numel() == 0:
        return None
    ok = torch.isclose(g, e, rtol=rtol, atol=atol, equal_nan=False)
    ok &= torch.isfinite(g) | (g == e)  # NaN never passes; an Inf matches only the same Inf
    ok &= ~torch.isnan(g)
    if bool(ok.all()):
        return None
    diff = (g - e).abs()
    finite = torch.isfinite(diff)
    rel = diff / e.abs().clamp_min(1e-12)
    first = [int(x) for x in torch.nonzero(~ok)[0].tolist()]
    not_finite = int((~torch.isfinite(g)).sum())
    reason = "values differ beyond tolerance"
    if not_finite and bool(torch.isfinite(e).all()):
        reason = f"{not_finite} output values are NaN or Inf"
    return Mismatch(
        trial=trial,
        output_index=index,
        reason=reason,
        max_abs_error=float(diff[finite].max()) if bool(finite.any()) else float("inf"),
        mean_abs_error=float(diff[finite].mean()) if bool(finite.any()) else float("inf"),
        max_rel_error=float(rel[finite].max()) if bool(finite.any()) else float("inf"),
        first_mismatch_index=first,
        expected=float(e[tuple(first)]),
        got=float(g[tuple(first)]),
        mismatched_fraction=float((~ok).double().mean()),
        atol=atol,
        rtol=rtol,
    )


def parameter_differences(reference, candidate) -> list[tuple[str, float]]:
    """(name, max abs difference) of each parameter or buffer that both models hold under one name,
    shape and dtype but with other values: weights are matched by drawing both under one seed, so
    a ModelNew that draws its own in another order holds other numbers under the same names."""
    import torch

    def named(model) -> dict:
        return {**dict(model.named_parameters()), **dict(model.named_buffers())}

    try:
        theirs, out = named(candidate), []
        for name, ref in named(reference).items():
            got = theirs.get(name)
            if not isinstance(got, torch.Tensor) or got.shape != ref.shape or got.dtype != ref.dtype:
                continue
            a, b = got.detach(), ref.detach()
            if not torch.equal(a, b):
                diff = a - b if a.is_floating_point() else a.double() - b.double()  # (bools do not subtract)
                out.append((name, float(diff.abs().max())))
        return out
    except Exception:  # noqa: BLE001  (a ModelNew whose parameters cannot be listed or compared: nothing to say)
        return []


def weights_finding(differences: list[tuple[str, float]], seed: int) -> Finding | None:
    """Why a candidate whose parameters differ from the reference's fails: it drew them in another order."""
    if not differences:
        return None
    named = ", ".join(f"ModelNew.{n} differs from Model.{n} (max abs diff {d:.3g})" for n, d in differences[:4])
    more = f" and {len(differences) - 4} more" if len(differences) > 4 else ""
    return Finding(
        code="weights_differ",
        severity="warning",
        evidence={"parameters": {n: d for n, d in differences}, "seed": seed},
        message=f"{named}{more}: both models draw their parameters under seed {seed} (torch.manual_seed before "
        "each constructor, on the device they run on), so they match only when drawn by the same calls in the same order; draw them in "
        "Model's order or copy them from a Model",
    )
