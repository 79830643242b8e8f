"""Does the analysis agent's top advice point at what actually makes the kernel faster?

For each example problem: profile the naive Triton candidate (depth metrics: torch.profiler +
Nsight Compute when ncu is on PATH), take the agent's top recommendation, profile the tuned
candidate too, and time naive vs tuned (and eager / torch.compile) through Engine.verify.
"Tuned applies the advice" is judged from the data: the top rule no longer fires on the tuned
profile. Run on a GPU machine:

    python bench/profile_advice.py --out bench/results/profile-advice

Writes OUT/<device>.json and OUT/<device>.md (e.g. h100.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from device_label import device_label  # noqa: E402

from kforge_mcp.api import Engine  # noqa: E402

PROBLEMS = ["fused_bias_gelu", "row_softmax", "gemm_bias_relu"]
WHAT_TUNED_DOES = {
    "fused_bias_gelu": "one fused kernel (bias + gelu + scale) instead of three",
    "row_softmax": "one kernel per row with the whole row in a block and 4+ warps, instead of three 1-warp passes",
    "gemm_bias_relu": "64x64 tiles, 4 warps, bias+relu fused into the epilogue (tl.dot with ieee fp32, so no tensor cores), "
    "instead of 16x16 tiles, 1 warp and a separate bias+relu kernel",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default=None)
    parser.add_argument("--depth", default="metrics", choices=("timeline", "metrics"))
    parser.add_argument("--only")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    engine = Engine(home=tempfile.mkdtemp(prefix="kforge-bench-"))
    results = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "problems": {}}
    try:
        results["targets"] = engine.list_targets().model_dump()["host"]
        for name in [args.only] if args.only else PROBLEMS:
            problem = str(ROOT / "examples" / "problems" / f"{name}.py")
            cand = {v: str(ROOT / "examples" / "candidates" / name / f"{v}.py") for v in ("triton_naive", "triton")}
            entry: dict = {"tuned_does": WHAT_TUNED_DOES[name]}
            for v, path in cand.items():
                t0 = time.time()
                prof = engine.profile(problem, path, target="triton", device=args.device, depth=args.depth)
                analysis = engine.analyze_profile(profile=prof.model_dump())
                entry[v] = {
                    "profile": prof.model_dump(mode="json"),
                    "analysis": analysis.model_dump(mode="json"),
                    "profile_seconds": time.time() - t0,
                }
                ver = engine.verify(problem, path, target="triton", device=args.device)
                entry[v]["verify"] = ver.model_dump(mode="json")
                print(
                    f"{name} {v}: verdict {ver.verdict}, candidate "
                    f"{ver.timing.candidate.median_ms if ver.timing and ver.timing.candidate else None} ms; "
                    f"top: {analysis.recommendations[0].title if analysis.recommendations else 'none'}",
                    flush=True,
                )
            naive_recs = entry["triton_naive"]["analysis"]["recommendations"]
            tuned_rules = {r["rule"] for r in entry["triton"]["analysis"]["recommendations"]}
            top = naive_recs[0] if naive_recs else None
            entry["top"] = top
            entry["tuned_applies_top"] = None if top is None else top["rule"] not in tuned_rules
            tn = entry["triton_naive"]["verify"].get("timing") or {}
            tt = entry["triton"]["verify"].get("timing") or {}
            try:
                entry["speedup_tuned_over_naive"] = tn["candidate"]["median_ms"] / tt["candidate"]["median_ms"]
            except (KeyError, TypeError, ZeroDivisionError):
                entry["speedup_tuned_over_naive"] = None
            results["problems"][name] = entry
    finally:
        engine.close()
    (out / f"{device_label()}.json").write_text(json.dumps(results, separators=(",", ":"), default=str))
    (out / f"{device_label()}.md").write_text(markdown(results))
    print((out / f"{device_label()}.md").read_text())


def _ms(entry: dict, variant: str, key: str = "candidate"):
    t = (entry[variant]["verify"].get("timing") or {}).get(key)
    return f"{t['median_ms'] * 1e3:.1f} us" if t else "-"


def markdown(results: dict) -> str:
    host = results.get("targets", {})
    lines = [
        "# Profiler advice: naive vs tuned Triton candidates",
        "",
        f"Run {results['started']} on {next((v for k, v in host.items() if k.startswith('device cuda')), 'no GPU')} "
        f"(torch {host.get('torch', '?')}). Times: Engine.verify medians (CUDA events, L2 flushed). "
        "'Tuned applies it' is judged from the data: the top rule no longer fires on the tuned candidate's profile. "
        "The tuned candidates were not written from this agent's advice; they are a test of the advice, not its output.",
        "",
        "| problem | top recommendation (naive) | expected gain | naive | tuned | eager | tuned / naive speedup "
        "| tuned applies it? | verdicts |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in results["problems"].items():
        top = e.get("top")
        sp = e.get("speedup_tuned_over_naive")
        verdicts = f"{e['triton_naive']['verify'].get('verdict')} / {e['triton']['verify'].get('verdict')}"
        applies = {True: "yes", False: "no", None: "-"}[e.get("tuned_applies_top")]
        lines.append(
            f"| {name} | {top['title'] if top else 'none'} | {top['expected_gain']:.0%} | "
            f"{_ms(e, 'triton_naive')} | {_ms(e, 'triton')} | {_ms(e, 'triton', 'eager')} | "
            f"{f'{sp:.2f}x' if sp else '-'} | {applies} | {verdicts} |"
            if top
            else f"| {name} | none | - | {_ms(e, 'triton_naive')} | {_ms(e, 'triton')} | {_ms(e, 'triton', 'eager')} | "
            f"{f'{sp:.2f}x' if sp else '-'} | - | {verdicts} |"
        )
    lines.append("")
    for name, e in results["problems"].items():
        lines += [f"## {name}", "", f"Tuned candidate: {e['tuned_does']}.", ""]
        for v in ("triton_naive", "triton"):
            a = e[v]["analysis"]
            lines.append(f"- **{v}** ({e[v]['profile'].get('source')}): {a['summary']}")
            for r in a["recommendations"][:3]:
                lines.append(f"  - {r['title']} (gain ~{r['expected_gain']:.0%}, {r['priority']}): {r['gain_basis']}")
            for n in e[v]["profile"].get("notes", [])[:4]:
                lines.append(f"  - note: {n}")
        lines.append("")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
