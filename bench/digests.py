"""The small files the tests read, derived from the captures and records in bench/ (tests read nothing
under bench/ itself):

    python bench/digests.py           # write tests/data/<set>/ from bench/
    python bench/digests.py --check   # list the digests that differ from what their sources give; exit 1 if any

- analysis-corpus: per labelled case of bench/analysis/manifest.json, its label, workload and time measured
  outside ncu (cases.json) and its ncu raw and details pages (bench/analysis/captures/raw.tar.xz).
- advice-calibration: per before/after pair of bench/results/advice-calibration, its rule, change, workload
  and both times (pairs.json) and the before kernel's raw page, split from the capture at the marker launches.
- advice-trajectories: per problem and step of each finished record under bench/results/advice-trajectories, the
  candidate's docstring (bench/candidates/), the top advice on it, its verify figures and its whole profile report
  (<record>.json).

Pages are cut to what kforge's parser reads: the raw pages to the columns of the metrics kforge asks ncu for,
the details pages to the metrics whose rows change the parsed report (ncu's rule rows all kept); a cut page
must parse to the same report as the captured one, or this stops.
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import advice_calibration  # noqa: E402
from packed_captures import unpacked  # noqa: E402

from kforge_mcp.platforms.nvidia.ncu import report_from_csv  # noqa: E402
from kforge_mcp.platforms.nvidia.ncu_metrics import DEFAULT_METRICS  # noqa: E402

DATA = ROOT / "tests" / "data"
SETS = ("analysis-corpus", "advice-calibration", "advice-trajectories")
# the raw page's metric columns kforge's parser may read: what it asks ncu for, and two ncu adds
ASKED = {*DEFAULT_METRICS, "dram__bytes.sum.per_second", "device__attribute_display_name"}
WORKLOAD = ("flops", "bytes", "dtype", "atol", "rtol")


def csv_text(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def parsed(text: str) -> dict:
    return report_from_csv(text).model_dump()


def same_report(full: str, cut: str, what: str) -> str:
    if parsed(cut) != parsed(full):
        raise SystemExit(f"{what}: the cut page parses to another report than the captured one")
    return cut


def cut_raw(text: str, what: str) -> str:
    rows = list(csv.reader(io.StringIO(text)))
    keep = [i for i, name in enumerate(rows[0]) if "__" not in name or name in ASKED]
    return same_report(text, csv_text([[r[i] for i in keep if i < len(r)] for r in rows]), what)


def cut_details(text: str, what: str) -> str:
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], rows[1:]
    metric, rule = header.index("Metric Name"), header.index("Rule Name")
    want = parsed(text)
    for name in dict.fromkeys(r[metric] for r in body if not r[rule]):
        trial = [r for r in body if r[rule] or r[metric] != name]
        if parsed(csv_text([header, *trial])) == want:
            body = trial
    return same_report(text, csv_text([header, *body]), what)


def as_json(data: object) -> str:
    return json.dumps(data, indent=1) + "\n"


def analysis_corpus() -> dict[str, str]:
    files, cases = {}, []
    with unpacked(HERE / "analysis" / "captures") as captures:
        for case in json.loads((HERE / "analysis" / "manifest.json").read_text())["cases"]:
            name = case["name"]
            meta_path = captures / f"{name}.meta.json"
            if not meta_path.is_file():
                continue
            meta = {**case, **json.loads(meta_path.read_text())}
            cases.append(
                {
                    "name": name,
                    "label": case["label"],
                    "workload": {k: meta[k] for k in WORKLOAD if k in meta},
                    "device": meta.get("device"),
                    "measured_ms": meta.get("measured_ms"),
                }
            )
            for suffix, cut in ((".ncu-raw.csv", cut_raw), (".ncu-details.csv", cut_details)):
                page = captures / f"{name}{suffix}"
                if page.is_file():
                    files[f"{name}{suffix}"] = cut(page.read_text(), f"{page.name}")
    files["cases.json"] = as_json({"cases": cases})
    return files


def calibration_pairs() -> dict[str, str]:
    data, pages, skipped = advice_calibration.read_capture(advice_calibration.CAPTURES)
    files, pairs = {}, []
    for name in data["order"]:
        if name not in pages:
            continue
        entry = data["pairs"][name]
        pairs.append(
            {
                "name": name,
                "rule": entry["rule"],
                "change": entry["change"],
                "workload": {k: entry["meta"][k] for k in WORKLOAD if k in entry["meta"]},
                "before_ms": entry["before"]["median_ms"],
                "after_ms": entry["after"]["median_ms"],
            }
        )
        files[f"{name}.ncu-raw.csv"] = cut_raw(pages[name], f"pair {name}")
    files["pairs.json"] = as_json({"device": data["env"]["device"], "pairs": pairs, "skipped": skipped})
    return files


# the trajectory records the tests read: finished ones (every problem at least four steps)
TRAJECTORIES = ("h200",)


def trajectories() -> dict[str, str]:
    out = {}
    for name in TRAJECTORIES:
        record = HERE / "results" / "advice-trajectories" / name
        device, problems = "", {}
        for f in sorted(record.glob("step*.json"), key=lambda p: int(p.stem[4:])):
            data = json.loads(f.read_text())
            device = data["device"]
            for rec in data["records"]:
                source = (HERE / "candidates" / rec["problem"] / rec["candidate"]).read_text()
                advice, v = rec["profile"]["advice"], rec["verify"]
                problems.setdefault(rec["problem"], []).append(
                    {
                        "step": rec["step"],
                        "candidate": rec["candidate"],
                        "docstring": ast.get_docstring(ast.parse(source)) or "",
                        "top_rule": advice[0]["rule"] if advice else None,
                        "top_advice": advice[0]["title"] if advice else None,
                        "advice": [{k: r[k] for k in ("rule", "title", "priority", "expected_gain")} for r in advice],
                        "verdict": v["verdict"],
                        "candidate_ms": v["candidate_ms"],
                        "fraction_of_sol": v["fraction_of_sol"],
                        "speedup": v["speedup"],
                        "profile_report": rec["profile_report"],  # the advice is read from it again offline
                    }
                )
        out[f"{name}.json"] = as_json({"device": device, "problems": problems})
    return out


def derive() -> dict[str, dict[str, str]]:
    return {
        "analysis-corpus": analysis_corpus(),
        "advice-calibration": calibration_pairs(),
        "advice-trajectories": trajectories(),
    }


def stale(derived: dict[str, dict[str, str]]) -> list[str]:
    """tests/data paths that are missing, differ from their source or have none."""
    out = []
    for name, files in derived.items():
        folder = DATA / name
        present = {f.name for f in folder.iterdir()} if folder.is_dir() else set()
        for fname in sorted(present | set(files)):
            path = folder / fname
            if fname not in files:
                out.append(f"{path.relative_to(ROOT)}: derived from nothing in bench/")
            elif fname not in present:
                out.append(f"{path.relative_to(ROOT)}: missing")
            elif path.read_text() != files[fname]:
                out.append(f"{path.relative_to(ROOT)}: differs from what bench/ gives")
    return out


def write(derived: dict[str, dict[str, str]]) -> None:
    for name, files in derived.items():
        folder = DATA / name
        folder.mkdir(parents=True, exist_ok=True)
        for f in folder.iterdir():
            if f.name not in files:
                f.unlink()
        for fname, text in files.items():
            (folder / fname).write_text(text)
        print(f"{folder.relative_to(ROOT)}: {len(files)} files, {sum(len(t) for t in files.values())} bytes")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare, write nothing")
    args = ap.parse_args(argv)
    derived = derive()
    if not args.check:
        write(derived)
        return 0
    problems = stale(derived)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
