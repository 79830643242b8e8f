"""How well the analysis rules' expected gains hold: the agent's prediction for each captured before
kernel against the gain its after kernel realized on the GPU.

    python bench/advice_calibration.py [--captures DIR] [--out FILE.md] [--json FILE.json]

Reads what bench/analysis/pair_capture.py wrote (pairs.json: both timings per pair; ncu-raw-N.csv, kept
packed in raw.tar.xz: the before kernels' raw pages, split per pair at the marker launches) and scores it
with ``kforge_mcp.advice.calibration``: the agent runs offline on each before profile with the roofline of
the pair's FLOPs and minimum bytes and the before time measured outside ncu, and the expected gain of the
rule the pair's change follows (0 when that rule does not fire) is set against 1 - after / before.

Targets: the sign is right (the rule promises >= 5% exactly when the change saves >= 5%) in >= 90% of
pairs; no medium- or high-priority advice made its kernel more than 5% slower; the median gap between
predicted and realized gain is <= 10 points. Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from packed_captures import unpacked  # noqa: E402

from kforge_mcp.advice.calibration import (  # noqa: E402
    HARM,
    HELPS,
    TARGET_GAP,
    TARGET_SIGN,
    Calibration,
    Pair,
    Workload,
    calibrate,
)
from kforge_mcp.platforms.nvidia.ncu import report_from_csv  # noqa: E402

CAPTURES = HERE / "results" / "advice-calibration"
MARKER = "pair_marker_kernel"


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


def read_capture(captures: Path) -> tuple[dict, dict[str, str], dict[str, str]]:
    """pairs.json, each scorable pair's raw page, and why each other pair cannot be scored."""
    with unpacked(captures) as folder:
        data = json.loads((folder / "pairs.json").read_text())
        raws = sorted(folder.glob("ncu-raw-*.csv"), key=lambda p: int(p.stem.split("-")[-1]))
        pages = split_raw(raws, data["order"])
    skipped = {}
    for name in data["order"]:
        p = data["pairs"][name]
        if "error" in p or name not in pages or not p.get("check", {}).get("ok"):
            skipped[name] = p.get("error") or "no profile or failed check"
            pages.pop(name, None)
    return data, pages, skipped


def pair(name: str, entry: dict, page: str) -> Pair:
    return Pair(
        name=name,
        rule=entry["rule"],
        change=entry["change"],
        workload=Workload(**entry["meta"]),
        before_ms=entry["before"]["median_ms"],
        after_ms=entry["after"]["median_ms"],
        before=report_from_csv(page, f"{name} (before)", forwards=1),
    )


def table(cal: Calibration, skipped: dict[str, str], env: dict) -> str:
    lines = [
        f"Before/after pairs on the {cal.device} (Triton {env['triton']}, ncu {env['ncu_version']}); "
        "predicted: the expected gain of the rule the change follows (0 when it does not fire); "
        "realized: 1 - after / before.",
        "",
        "| pair | rule | change | before ms | after ms | predicted | realized | priority | gap (points) | sign |"
        " agent's top 3 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in cal.scores:
        lines.append(
            f"| {s.pair} | {s.rule} | {s.change} | {s.before_ms:.4f} | {s.after_ms:.4f} | "
            f"{s.predicted:.2f} | {s.realized:+.2f} | {s.priority} | {s.gap_points:.1f} | "
            f"{'right' if s.sign_right else 'WRONG'} | {'; '.join(s.top)} |"
        )
    for name, why in skipped.items():
        lines.append(f"| {name} | | skipped: {why[:120]} | | | | | | | | |")
    lines += ["", "| rule | pairs | sign right | median predicted | median realized | median gap (points) |"]
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for rule in sorted({s.rule for s in cal.scores}):
        rs = [s for s in cal.scores if s.rule == rule]
        pred, real = statistics.median(s.predicted for s in rs), statistics.median(s.realized for s in rs)
        lines.append(
            f"| {rule} | {len(rs)} | {sum(s.sign_right for s in rs)}/{len(rs)} | {pred:.2f} | {real:+.2f} | "
            f"{statistics.median(s.gap_points for s in rs):.1f} |"
        )
    gap = f"{cal.median_gap_points:.1f}" if cal.median_gap_points is not None else "-"
    lines += [
        "",
        f"- pairs: {len(cal.scores)} over {cal.rules} rules",
        f"- sign right (the rule promises >= {HELPS:.0%} exactly when the change saves >= {HELPS:.0%}): "
        f"{cal.sign_right:.0%} (target >= {TARGET_SIGN:.0%})",
        f"- medium/high-priority advice that made a kernel more than {-HARM:.0%} slower: "
        f"{', '.join(cal.harmful) or 'none'} (target none)",
        f"- median gap between predicted and realized gain: {gap} points (target <= {TARGET_GAP:g})",
        "",
        f"{'PASS' if cal.ok else 'FAIL'}",
    ]
    return "\n".join(lines)


def trajectory_pairs(folder: Path) -> tuple[list[Pair], str]:
    """The record's pairs and the device its steps ran on, from its steps loose or packed."""
    with unpacked(folder) as records:  # a finished record's steps may be packed
        device = json.loads(next(records.glob("step*.json")).read_text())["device"]
        return steps_as_pairs(records), device


def steps_as_pairs(folder: Path) -> list[Pair]:
    """Each step of a recorded trajectory (bench/advice_trajectories.py) and the next as a pair: the step's GPU
    profile with its problem's roofline as verify makes it here, the rule the next step followed (the re-read
    advice where the rules changed after the run), and both steps' verify medians."""
    from advice_trajectories import PROBLEMS, advice_followed, timed_pairs  # a sibling in bench/

    from kforge_mcp.api import Engine
    from kforge_mcp.judge.roofline import with_measured
    from kforge_mcp.profiling.report import ProfileReport

    steps = sorted(folder.glob("step*.json"), key=lambda p: int(p.stem.removeprefix("step")))
    chains: dict[str, list[dict]] = {}
    for p in steps:
        for r in json.loads(p.read_text())["records"]:
            chains.setdefault(r["problem"], []).append(r)
    pairs: list[tuple[int, int, Pair]] = []  # by step, then problem, as the step files list them
    engine = Engine(home=Path(tempfile.mkdtemp(prefix="kforge-calibration-")))
    try:
        for index, (problem, chain) in enumerate(chains.items()):
            for rec, nxt in timed_pairs(chain):
                advice, _ = advice_followed(folder, rec)
                if not advice or nxt["verify"]["verdict"] != "pass" or rec["verify"]["verdict"] != "pass":
                    continue
                report = ProfileReport.model_validate(rec["profile_report"])
                roof = engine.roofline(
                    str(PROBLEMS / f"{problem}.py"), device_name=report.device_name, atol=1e-4, rtol=1e-4
                )
                report.roofline = with_measured(roof, rec["verify"]["candidate_ms"])
                pairs.append(
                    (
                        rec["step"],
                        index,
                        Pair(
                            name=f"{problem} {rec['candidate'].removesuffix('.py')} -> "
                            f"{nxt['candidate'].removesuffix('.py')}",
                            rule=advice[0]["rule"],
                            change=advice[0]["title"],
                            before_ms=rec["verify"]["candidate_ms"],
                            after_ms=nxt["verify"]["candidate_ms"],
                            before=report,
                        ),
                    )
                )
    finally:
        engine.close()
    return [pair for _, _, pair in sorted(pairs, key=lambda t: t[:2])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--captures", type=Path, default=CAPTURES)
    ap.add_argument(
        "--trajectories",
        type=Path,
        action="append",
        default=[],
        help="a folder of trajectory steps (bench/results/advice-trajectories/conv-h100): its consecutive steps "
        "scored as pairs too",
    )
    ap.add_argument("--out", help="write the table as markdown here")
    ap.add_argument("--json", help="write every pair's score here")
    args = ap.parse_args(argv)
    data, pages, skipped = read_capture(args.captures)
    pairs = [pair(name, data["pairs"][name], pages[name]) for name in data["order"] if name in pages]
    devices = {}
    for folder in args.trajectories:
        more, devices[folder] = trajectory_pairs(folder)
        pairs += more
    cal = calibrate(pairs, data["env"]["device"])
    text = table(cal, skipped, data["env"])
    for folder, device in devices.items():
        text = (
            f"With the consecutive steps of the trajectories in {folder} as pairs "
            f"(profiled and timed on the {device}; the rule each next step followed, its gain as the rules price "
            "it now).\n\n" + text
        )
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(cal.model_dump_json(indent=1))
    return 0 if cal.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
