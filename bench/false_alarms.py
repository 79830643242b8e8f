"""Zero false alarms: a corpus of honest kernels (Triton, several autotuned over 5-6 configs, CUDA and
CuTe) verified on the GPU the way users run them: one verify_batch per problem, autotuned kernels
among the later items (where the H100 flagged 3 of 6 as ``spawned_threads``). Every finding of every
report is recorded; an honest kernel must come out ``pass`` with no suspicious or failing finding.

    python bench/false_alarms.py --out false-alarms.json [--targets triton,cuda,cute]
    python bench/false_alarms.py --report false-alarms.json ...   # markdown summary of one or more runs
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SMALL = {"fused_bias_gelu": "examples/problems/fused_bias_gelu.py", "row_softmax": "examples/problems/row_softmax.py"}
SMALL["gemm_bias_relu"] = "examples/problems/gemm_bias_relu.py"
LARGE = {name: f"bench/problems/{name}_large.py" for name in SMALL}
TRITON = {
    "fused_bias_gelu": ["triton", "triton_autotuned", "triton_naive"],
    "row_softmax": ["triton", "triton_autotuned", "triton_naive"],
    "gemm_bias_relu": ["triton", "triton_autotuned", "triton_3xtf32", "triton_3xtf32_fed"],
}


def corpus(targets: set[str]) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(problem name, problem path, [(target, candidate path)]) per verify_batch."""
    batches = []
    for size, problems in (("small", SMALL), ("large", LARGE)):
        for name, path in problems.items():
            items = []
            if "triton" in targets:
                items += [("triton", f"examples/candidates/{name}/{c}.py") for c in TRITON[name]]
            for target in ("cuda", "cute"):
                if target in targets:
                    items.append((target, f"examples/candidates/{name}/{target}.py"))
            if items:
                batches.append((f"{name} ({size})", path, items))
    batches.append(
        ("vector_add", "bench/problems/vector_add.py", [("triton", "bench/candidates/vector_add/triton.py")])
    )
    if "triton" not in targets:
        batches.pop()
    return batches


def run(targets: set[str], device: str) -> list[dict]:
    from kforge_mcp.api import Engine

    engine = Engine(allow_dirs=[ROOT, "/tmp"])
    rows = []
    try:
        for name, problem, items in corpus(targets):
            started = time.perf_counter()
            reports = engine.verify_batch(
                [{"problem": str(ROOT / problem), "candidate": str(ROOT / c), "target": t} for t, c in items],
                device=device,
                trials=5,
                timing_budget_s=0.5,
            )
            for (target, candidate), r in zip(items, reports):
                rows.append(
                    {
                        "problem": name,
                        "target": target,
                        "candidate": candidate,
                        "verdict": r.verdict,
                        "speedup": r.speedup,
                        "speedup_over": r.speedup_over,
                        "findings": [
                            {"code": f.code, "severity": f.severity, "evidence": f.evidence} for f in r.findings
                        ],
                        "errors": [e[:300] for e in r.errors if e][:2],
                        "mismatches": [m.reason for m in r.mismatches],
                    }
                )
                print(json.dumps({k: rows[-1][k] for k in ("problem", "target", "candidate", "verdict")}), flush=True)
            print(f"# {name}: {time.perf_counter() - started:.0f} s", flush=True)
    finally:
        engine.close()
    return rows


def report(paths: list[str]) -> str:
    runs = [json.loads(Path(p).read_text()) for p in paths]
    rows = [r for run in runs for r in run["rows"]]
    alarms = [
        r for r in rows if r["verdict"] != "pass" or any(f["severity"] in ("suspicious", "fail") for f in r["findings"])
    ]
    lines = [
        "# Honest kernels on the GPU: every finding (bench/false_alarms.py)",
        "",
        *(
            f"- {run['device_name']}, {run['date']}, torch {run['torch']}, targets {', '.join(run['targets'])}"
            for run in runs
        ),
        "",
        "| problem | target | candidate | verdict | speedup | findings (severity) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        found = ", ".join(f"{f['code']} ({f['severity']})" for f in r["findings"]) or "-"
        speed = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x over {r['speedup_over']}"
        lines.append(
            f"| {r['problem']} | {r['target']} | {Path(r['candidate']).name} | {r['verdict']} | {speed} | {found} |"
        )
    lines += [
        "",
        f"**{len(rows)} honest kernels, {len(alarms)} not a clean pass** "
        f"({sum(r['target'] == 'triton' for r in rows)} Triton, {sum(r['target'] == 'cuda' for r in rows)} CUDA, "
        f"{sum(r['target'] == 'cute' for r in rows)} CuTe)",
    ]
    for r in alarms:
        lines.append(
            f"- {r['problem']} {r['candidate']}: {r['verdict']} {r['findings']} {r['errors']} {r['mismatches']}"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--targets", default="triton,cuda,cute")
    ap.add_argument("--out", default="false-alarms.json")
    ap.add_argument("--report", nargs="+", metavar="JSON")
    args = ap.parse_args()
    if args.report:
        print(report(args.report), end="")
        return
    import torch

    targets = set(args.targets.split(","))
    record = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device_name": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "targets": sorted(targets),
        "rows": run(targets, args.device),
    }
    Path(args.out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
