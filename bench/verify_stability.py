"""How far to trust verify's speedup: the same candidate verified again and again.

    python bench/verify_stability.py --out DIR [--repeats 5]

For each example problem at its shipped size and at a GPU size (bench/problems/*_large.py),
verifies the Triton candidate ``--repeats`` times on one warm engine (eager and
torch.compile baselines) and reports the speedups, their spread ((max - min) / median),
each run's 95% confidence interval and coefficient of variation, and the device state.
The aim: repeated verifies within 3%.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import tempfile
from pathlib import Path

import torch
from device_label import device_label

from kforge_mcp.api import Engine

ROOT = Path(__file__).resolve().parent.parent
CASES = [
    (
        name,
        str(ROOT / "examples" / "problems" / f"{name}{suffix}.py")
        if not suffix
        else str(ROOT / "bench" / "problems" / f"{name}{suffix}.py"),
        str(ROOT / "examples" / "candidates" / name / "triton.py"),
    )
    for suffix in ("", "_large")
    for name in ("fused_bias_gelu", "row_softmax", "gemm_bias_relu")
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "verify-stability"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    engine = Engine(home=tempfile.mkdtemp(prefix="kforge-stability-"))
    rows = []
    try:
        for _name, prob, cand in CASES:
            runs = [engine.verify(prob, cand, target="triton") for _ in range(args.repeats + 1)][1:]  # first: warm-up
            speedups = [r.speedup for r in runs if r.speedup]
            rows.append(
                {
                    "problem": Path(prob).stem,
                    "verdicts": [r.verdict for r in runs],
                    "speedups": speedups,
                    "over": [r.speedup_over for r in runs],
                    "ci": [r.speedup_ci for r in runs],
                    "cv_candidate": [r.timing.candidate.cv for r in runs if r.timing],
                    "candidate_ms": [r.timing.candidate.median_ms for r in runs if r.timing],
                    "spread": (max(speedups) - min(speedups)) / statistics.median(speedups) if speedups else None,
                    "device_state": runs[-1].device_state,
                    "findings": sorted({f.code for r in runs for f in r.findings}),
                    "errors": [e[:300] for r in runs for e in r.errors],
                }
            )
            print(json.dumps(rows[-1])[:400], flush=True)
    finally:
        engine.close()
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = device_label()
    (out / f"{stem}.json").write_text(json.dumps({"device": device, "rows": rows}, indent=1))
    lines = [
        f"# verify: repeated speedups of one candidate ({device})",
        "",
        f"- date: {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}; torch {torch.__version__}",
        f"- command: `python bench/verify_stability.py --repeats {args.repeats}` (one warm engine; the first verify of each is a warm-up)",
        "",
        "| problem | verdicts | speedups | over | spread (max-min)/median | within 3% | candidate cv | last 95% CI |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = r["ci"][-1]
        lines.append(
            f"| {r['problem']} | {', '.join(r['verdicts'])} | {', '.join(f'{s:.3f}' for s in r['speedups'])} | {', '.join(sorted({o for o in r['over'] if o}))} | "
            f"{r['spread']:.1%} | {'yes' if r['spread'] is not None and r['spread'] <= 0.03 else 'no'} | "
            f"{statistics.median(r['cv_candidate']):.3f} | {ci[0]:.3f}-{ci[1]:.3f} |"
        )
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
