"""How well the analysis rules' expected gains hold: the agent's prediction for each captured before
kernel against the gain its after kernel realized on the GPU.

    python bench/advice_calibration.py [--captures DIR] [--out FILE.md]

Reads what bench/analysis/pair_capture.py wrote (pairs.json: both timings per pair; ncu-raw-N.csv: the
before kernels' raw pages, split per pair at the marker launches), runs the agent offline on each before
profile with the roofline of the pair's FLOPs and minimum bytes and the before time measured outside
ncu, and takes the expected gain of the rule the pair's change follows (0 when that rule does not fire).

Realized gain: 1 - after / before (median times). Targets: the sign is right (the rule promises >= 5%
exactly when the change saves >= 5%) in >= 90% of pairs; no medium- or high-priority advice made its
kernel more than 5% slower; the median gap between predicted and realized gain is <= 10 points.
Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from kforge_mcp.advice import agent  # noqa: E402
from kforge_mcp.judge.roofline import make_roofline, with_measured  # noqa: E402
from kforge_mcp.platforms.nvidia.ncu import report_from_csv  # noqa: E402

CAPTURES = HERE / "results" / "advice-calibration"
MARKER = "pair_marker_kernel"
HELPS = 0.05  # a gain under 5% is within timing noise and not worth a round
TARGET_SIGN, HARM, TARGET_GAP = 0.9, -0.05, 10.0


def split_raw(paths: list[Path], order: list[str]) -> dict[str, str]:
    """Each pair's before launches as a raw-page CSV of its own (header, units, its rows)."""
    out, seen = {}, 0
    for path in paths:
        rows = list(csv.reader(io.StringIO(path.read_text())))
        start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
        header, units = rows[start], rows[start + 1]
        col = header.index("Kernel Name")
        current: list[list[str]] | None = None
        for r in rows[start + 2 :]:
            if len(r) <= col:
                continue
            if r[col] == MARKER:
                current = []
                out[order[seen]] = (header, units, current)  # units differ between pages (us, ms)
                seen += 1
            elif current is not None:
                current.append(r)
    texts = {}
    for name, (header, units, launches) in out.items():
        if launches:
            buf = io.StringIO()
            csv.writer(buf, quoting=csv.QUOTE_ALL).writerows([header, units, *launches])
            texts[name] = buf.getvalue()
    return texts


def evaluate(captures: Path) -> tuple[list[dict], dict]:
    data = json.loads((captures / "pairs.json").read_text())
    order = data["order"]
    raw = split_raw(sorted(captures.glob("ncu-raw-*.csv"), key=lambda p: int(p.stem.split("-")[-1])), order)
    device = data["env"]["device"]
    rows = []
    for name in order:
        p = data["pairs"][name]
        if "error" in p or name not in raw or not p.get("check", {}).get("ok"):
            rows.append({"pair": name, "rule": p["rule"], "skipped": p.get("error") or "no profile or failed check"})
            continue
        meta, before, after = p["meta"], p["before"]["median_ms"], p["after"]["median_ms"]
        report = report_from_csv(raw[name], f"{name} (before)", forwards=1)
        roof = make_roofline(
            meta["flops"], meta["bytes"], meta["dtype"], device, atol=meta.get("atol"), rtol=meta.get("rtol")
        )
        report.roofline = with_measured(roof, before)
        a = agent.analyze(report)
        rec = next((r for r in a.recommendations if r.rule == p["rule"]), None)
        pred = rec.expected_gain if rec else 0.0
        realized = 1 - after / before
        rows.append(
            {
                "pair": name,
                "rule": p["rule"],
                "change": p["change"],
                "before_ms": before,
                "after_ms": after,
                "predicted": pred,
                "realized": realized,
                "priority": rec.priority if rec else "not fired",
                "gap": abs(pred - realized) * 100,
                "sign_right": (pred >= HELPS) == (realized >= HELPS),
                "harmful": bool(rec and rec.priority in ("medium", "high") and realized < HARM),
                "top": [f"{r.rule} {r.expected_gain:.2f}" for r in a.recommendations[:3]],
                "kinds": sorted({f"{k.category}/{k.compute_path or '-'}" for k in report.device_kernels()}),
                "gain_basis": rec.gain_basis if rec else "",
            }
        )
    done = [r for r in rows if "skipped" not in r]
    summary = {
        "pairs": len(done),
        "rules": len({r["rule"] for r in done}),
        "sign_right": sum(r["sign_right"] for r in done) / max(len(done), 1),
        "harmful": [r["pair"] for r in done if r["harmful"]],
        "median_gap_points": statistics.median(r["gap"] for r in done) if done else None,
        "device": device,
        "triton": data["env"]["triton"],
        "ncu": data["env"]["ncu_version"],
    }
    summary["ok"] = bool(
        done
        and summary["sign_right"] >= TARGET_SIGN
        and not summary["harmful"]
        and summary["median_gap_points"] <= TARGET_GAP
    )
    return rows, summary


def table(rows: list[dict], summary: dict) -> str:
    lines = [
        f"Before/after pairs on the {summary['device']} (Triton {summary['triton']}, ncu {summary['ncu']}); "
        "predicted: the expected gain of the rule the change follows (0 when it does not fire); "
        "realized: 1 - after / before.",
        "",
        "| pair | rule | change | before ms | after ms | predicted | realized | priority | gap (points) | sign |"
        " agent's top 3 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['pair']} | {r['rule']} | skipped: {r['skipped'][:120]} | | | | | | | | |")
            continue
        lines.append(
            f"| {r['pair']} | {r['rule']} | {r['change']} | {r['before_ms']:.4f} | {r['after_ms']:.4f} | "
            f"{r['predicted']:.2f} | {r['realized']:+.2f} | {r['priority']} | {r['gap']:.1f} | "
            f"{'right' if r['sign_right'] else 'WRONG'} | {'; '.join(r['top'])} |"
        )
    lines += ["", "| rule | pairs | sign right | median predicted | median realized | median gap (points) |"]
    lines.append("| --- | --- | --- | --- | --- | --- |")
    done = [r for r in rows if "skipped" not in r]
    for rule in sorted({r["rule"] for r in done}):
        rs = [r for r in done if r["rule"] == rule]
        pred, real = statistics.median(r["predicted"] for r in rs), statistics.median(r["realized"] for r in rs)
        lines.append(
            f"| {rule} | {len(rs)} | {sum(r['sign_right'] for r in rs)}/{len(rs)} | {pred:.2f} | {real:+.2f} | "
            f"{statistics.median(r['gap'] for r in rs):.1f} |"
        )
    s = summary
    lines += [
        "",
        f"- pairs: {s['pairs']} over {s['rules']} rules",
        f"- sign right (the rule promises >= {HELPS:.0%} exactly when the change saves >= {HELPS:.0%}): "
        f"{s['sign_right']:.0%} (target >= {TARGET_SIGN:.0%})",
        f"- medium/high-priority advice that made a kernel more than {-HARM:.0%} slower: "
        f"{', '.join(s['harmful']) or 'none'} (target none)",
        f"- median gap between predicted and realized gain: {s['median_gap_points']:.1f} points "
        f"(target <= {TARGET_GAP:g})",
        "",
        f"{'PASS' if s['ok'] else 'FAIL'}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--captures", default=str(CAPTURES))
    ap.add_argument("--out", help="write the table as markdown here")
    ap.add_argument("--json", help="write every pair's result here")
    args = ap.parse_args(argv)
    rows, summary = evaluate(Path(args.captures))
    text = table(rows, summary)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "pairs": rows}, indent=1))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
