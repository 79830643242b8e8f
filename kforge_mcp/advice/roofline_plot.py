"""A profile's roofline as a PNG, for hosts that show images: the device's bandwidth slope under the
compute ceiling of the path the bound assumes (the other paths considered dashed), the problem's
arithmetic intensity, its speed of light, and the measured forward."""

from __future__ import annotations

from pathlib import Path

from kforge_mcp.advice.drawing import one_at_a_time
from kforge_mcp.core.schemas import Roofline


@one_at_a_time
def draw_roofline(roof: Roofline, out: Path) -> Path | None:
    """``out`` with the plot drawn, or None when there is nothing to draw (no bytes, no peaks)."""
    if roof.bytes <= 0 or roof.peak_bandwidth <= 0 or roof.sol_ms <= 0:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if roof.flops <= 0:  # no counted FLOPs (a softmax, a copy): no intensity to place, only times to compare
        return _times(plt, roof, out)

    intensity = roof.flops / roof.bytes
    ridges = [p.peak_flops / roof.peak_bandwidth for p in roof.paths or []] + [roof.peak_flops / roof.peak_bandwidth]
    lo, hi = min([intensity, *ridges]) / 30, max([intensity, *ridges]) * 30
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for p in roof.paths:
        if p.path != roof.path:
            style = "--" if p.feasible else ":"
            label = f"{p.path} ceiling" + ("" if p.feasible else " (misses the tolerance)")
            ax.plot(xs, [min(p.peak_flops, roof.peak_bandwidth * x) for x in xs], style, lw=0.9, label=label)
    ax.plot(xs, [min(roof.peak_flops, roof.peak_bandwidth * x) for x in xs], "k-", lw=1.8, label=f"{roof.path} roof")
    ax.axvline(intensity, color="#888", lw=0.7, ls="-.")
    ax.plot([intensity], [roof.flops / (roof.sol_ms / 1e3)], "o", mfc="none", mec="k", ms=9, label="speed of light")
    if roof.measured_ms:
        achieved = roof.flops / (roof.measured_ms / 1e3)
        label = f"measured {roof.measured_ms:.3g} ms" + (
            f" (beats the {roof.path} bound: corrected, {100 * (roof.fraction_of_sol or 0):.2g}% of it)"
            if roof.below_bound
            else f", {100 * (roof.fraction_of_sol or 0):.2g}% of SOL"
        )
        ax.plot([intensity], [achieved], "o", color="#c62828", ms=7, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / minimum byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(f"{_device(roof)}: {roof.bound}-bound on the {roof.path} path", fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="lower right")
    return _save(plt, fig, out)


def _times(plt, roof: Roofline, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    bars = [("speed of light", roof.sol_ms, "#555")]
    if roof.measured_ms:
        bars.append(("measured", roof.measured_ms, "#c62828"))
    ax.barh([b[0] for b in bars], [b[1] for b in bars], color=[b[2] for b in bars])
    ax.set_xscale("log")
    ax.set_xlabel("ms per forward")
    ax.set_title(f"{_device(roof)}: memory-bound, {roof.bytes / 1e6:.3g} MB at least, no counted FLOPs", fontsize=9)
    return _save(plt, fig, out)


def _device(roof: Roofline) -> str:
    return roof.device + (" (placeholder peaks)" if roof.peaks_source == "placeholder" else "")


def _save(plt, fig, out: Path) -> Path:
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
