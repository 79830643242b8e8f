"""Compute paths measured on a problem's inputs, and the speed of light they give, checked on real kernels.

For each problem: every path's max error as a fraction of the tolerance (the reference emulated on the CPU,
judge/precision_paths.py), the path the bound takes and why, then a verify of each candidate on the device:
its verdict, time, sol_ms and fraction_of_sol. A passing kernel's fraction must be <= 1 and never null, and
a faster kernel of the same problem must get a larger one. A second measurement must come from the cache.

    PYTHONPATH=$PWD python bench/precision_paths.py [--device cuda] [--out FILE.md] [--json FILE.json]

Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kforge_mcp.api import Engine  # noqa: E402
from kforge_mcp.core.problem import resolve_source  # noqa: E402
from kforge_mcp.judge.roofline import from_measured  # noqa: E402

CASES = {  # problem -> candidates, slowest expected first
    "gemm_bias_relu_large": ["triton_ieee", "triton_3xtf32", "triton_bf16x3"],
    "gemm_add_relu_l2": ["triton_3xtf32", "triton_bf16x3"],
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--device-name", default=None, help="peaks to show the paths' rates at (default: the verify's)")
    ap.add_argument("--problems", nargs="*", default=list(CASES))
    ap.add_argument("--baselines", nargs="*", default=["eager", "compiled"])
    ap.add_argument("--out", help="write the tables as markdown here")
    ap.add_argument("--json", help="write every result here")
    args = ap.parse_args(argv)
    engine = Engine(home=Path(tempfile.mkdtemp(prefix="kforge-paths-")), allow_dirs=[ROOT])
    lines, results, failures = [], [], []
    try:
        for name in args.problems:
            prob = ROOT / "bench" / "problems" / f"{name}.py"
            src = resolve_source(str(prob), "problem", [ROOT])
            t0 = time.perf_counter()
            m = engine.measured_paths(src, timeout_s=900)
            measure_s = time.perf_counter() - t0
            again = engine.measured_paths(src)
            if not again.cached:
                failures.append(f"{name}: the second measurement did not come from the cache")
            verifies = []
            for cand in CASES.get(name, []):
                path = ROOT / "bench" / "candidates" / name / f"{cand}.py"
                v = engine.verify(
                    str(prob), str(path), target="triton", device=args.device, timeout_s=900, baselines=args.baselines
                )
                ms = v.timing.candidate.median_ms if v.timing else None
                verifies.append((cand, v, ms))
                print(f"{name} {cand}: {v.verdict} {ms} ms, fraction {v.fraction_of_sol}", flush=True)
            device_name = args.device_name or next(
                (v.device_state.get("name") for _, v, _ in verifies if v.device_state.get("name")), None
            )
            r = from_measured(m, device_name)
            lines += [
                f"## {name}",
                "",
                (
                    f"{m.flops:.4g} FLOPs, {m.bytes:.4g} minimum bytes, {m.dtype} at atol {m.atol:g} / rtol "
                    f"{m.rtol:g}; {m.products} product(s) emulated on {len(m.seeds)} input sets in {m.seconds:.1f} s "
                    f"in the worker ({measure_s:.1f} s end to end; the second call: cached={again.cached})."
                ),
                "",
                f"Bound on {r.device}: {r.path} ({r.bound}-bound), T_SOL {r.sol_ms:.4g} ms. {r.path_reason}.",
                "",
                "| path | TFLOP/s | max error / tolerance | passes (<= margin) |",
                "| --- | --- | --- | --- |",
            ]
            for p in sorted(r.paths, key=lambda p: -p.peak_flops):
                err = "-" if p.max_error is None else f"{p.max_error:.3g}"
                lines.append(f"| {p.path} | {p.peak_flops / 1e12:.4g} | {err} | {'yes' if p.feasible else 'no'} |")
            lines += ["", "| candidate | verdict | median ms | sol_ms | fraction_of_sol | bound |", "| --- " * 6 + "|"]
            passing = []
            for cand, v, ms in verifies:
                frac = "-" if v.fraction_of_sol is None else f"{v.fraction_of_sol:.3f}"
                sol = "-" if v.sol_ms is None else f"{v.sol_ms:.4g}"
                corrected = any(f.code == "below_speed_of_light_model" for f in v.findings)
                lines.append(
                    f"| {cand} | {v.verdict} | {'-' if ms is None else f'{ms:.4g}'} | {sol} | {frac} | "
                    f"{(v.sol_path or '-').split(':')[0]}{' (corrected)' if corrected else ''} |"
                )
                if v.verdict == "pass":
                    passing.append((ms, v.fraction_of_sol, cand))
                    if v.fraction_of_sol is None or v.fraction_of_sol > 1:
                        failures.append(f"{name} {cand}: fraction_of_sol {v.fraction_of_sol}")
                results.append(
                    {
                        "problem": name,
                        "candidate": cand,
                        "verdict": v.verdict,
                        "median_ms": ms,
                        "sol_ms": v.sol_ms,
                        "fraction_of_sol": v.fraction_of_sol,
                        "sol_path": v.sol_path,
                        "findings": [(f.code, f.message[:300]) for f in v.findings],
                        "errors": [e[:300] for e in v.errors],
                    }
                )
            passing.sort()
            for (t1, f1, c1), (t2, f2, c2) in itertools.pairwise(passing):
                if t1 < t2 and f1 is not None and f2 is not None and not f1 > f2:
                    failures.append(
                        f"{name}: {c1} ({t1:.4g} ms) is faster than {c2} ({t2:.4g} ms) but not ranked above"
                    )
            lines.append("")
            results.append({"problem": name, "measured": m.model_dump(), "bound_path": r.path, "sol_ms": r.sol_ms})
            write(args, lines, results)  # each problem as it finishes
    finally:
        engine.close()
    lines.append("checks: " + ("; ".join(failures) if failures else "every passing fraction <= 1 and ranked; cached"))
    print("\n".join(lines))
    write(args, lines, results)
    return 1 if failures else 0


def write(args, lines: list[str], results: list[dict]) -> None:
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
