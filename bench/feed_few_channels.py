"""Feeding a convolution with fewer input channels than an MMA step's K, at shapes the rule was not drawn from.

23_Conv3d_GroupNorm_Mean's tap-loop kernel (bench/candidates/conv3d_groupnorm_mean_l2/step3_channels_last_taps.py)
against its TMA persistent version (step4_tma_persistent.py), each verified twice in turn on one engine, at the
published shape and at two others (bench/problems/conv3d_groupnorm_mean_wide_volume.py, _64_channels.py): the
candidates' median times, and the advice the rules give the tap-loop kernel's metrics profile at each shape.

    python bench/feed_few_channels.py --out bench/results/feed-few-channels/h100.json

Needs a GPU with TMA (sm_90) and ncu on PATH.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = ROOT / "bench/candidates/conv3d_groupnorm_mean_l2"
PROBLEMS = [
    ROOT / "bench/problems" / f"{name}.py"
    for name in ("conv3d_groupnorm_mean_l2", "conv3d_groupnorm_mean_wide_volume", "conv3d_groupnorm_mean_64_channels")
]
STEPS = ("step3_channels_last_taps.py", "step4_tma_persistent.py")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from kforge_mcp.advice import agent
    from kforge_mcp.api import Engine

    record: dict = {}
    engine = Engine(home=Path(tempfile.mkdtemp(prefix="kforge-feed-")), allow_dirs=[ROOT])
    try:
        for problem in PROBLEMS:
            runs = []
            for step in STEPS * 2:  # in turn, twice: each time beside the other's
                v = engine.verify(str(problem), str(CANDIDATES / step), target="triton", device=args.device)
                t = v.timing
                runs.append(
                    {
                        "candidate": step,
                        "verdict": v.verdict,
                        "candidate_ms": t.candidate.median_ms if t and t.candidate else None,
                        "eager_ms": t.eager.median_ms if t and t.eager else None,
                    }
                )
                print(json.dumps({"problem": problem.stem, **runs[-1]}), flush=True)
            report = engine.profile(
                str(problem), str(CANDIDATES / STEPS[0]), target="triton", device=args.device, depth="metrics"
            )
            a = agent.analyze(report)
            advice = {
                "ranked": [[r.rule, round(r.expected_gain, 3), r.priority] for r in a.recommendations],
                "set_apart": [[r.rule, r.title] for r in a.no_gain],
            }
            print(json.dumps({"problem": problem.stem, "advice on the tap-loop kernel": advice}), flush=True)
            ms = {s: sorted(r["candidate_ms"] for r in runs if r["candidate"] == s) for s in STEPS}
            feeding = 1 - sum(ms[STEPS[1]]) / sum(ms[STEPS[0]])
            record[problem.stem] = {"runs": runs, "advice on the tap-loop kernel": advice, "feeding realized": feeding}
    finally:
        engine.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
