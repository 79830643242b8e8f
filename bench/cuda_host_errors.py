"""How long a CUDA source with an error in its host code waits for its verdict, and where the error points.

Each CUDA corpus source (tests/cuda_sources/) gets its broken twin, as the corpus tests break them: an
undeclared name or a wrong type at the host function's last ``return x;``. On one running server (its first
verify, of a source outside the corpus, pays the worker's start and the headers), each twin is verified twice:
its first verify (what an agent waits for after a host-code mistake) and the same text again. Each records the
verdict, the wall time, the first error and whether it names the broken line.

    python bench/cuda_host_errors.py --out bench/results/cuda-host-errors/h100.json
    python bench/cuda_host_errors.py --only kernelbench_add dispatch_floating_half --out /tmp/some.json

With ``PYTHONPATH=<another checkout>`` first, the product code of that checkout is the one timed (a before); name
its commit with ``--commit`` (a copied working tree may not know its own).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]

from cuda_fast_build import CORPUS_DIR, missing_headers, progress, warm_server  # noqa: E402
from test_cuda_corpus import CORPUS, broken_twin  # noqa: E402  (the twins the corpus tests break)


def twin_steps(server, entry: dict, index: int, steps_run: tuple[str, ...]) -> dict:
    kind, text, line = broken_twin(entry, index)
    problem = str(CORPUS_DIR / entry["problem"])
    steps: dict = {"kind": kind, "line": line}
    for step in steps_run:
        seconds, report = server.verify(problem, f"twin_{entry['candidate']}", text, ["eager"])
        errors = [d for d in report.get("diagnostics") or [] if d.get("severity") == "error"]
        first = errors[0] if errors else {"message": "; ".join(report.get("errors") or [])}
        steps[step] = {
            "seconds": seconds,
            "verdict": report.get("verdict"),
            "error": {"line": first.get("line"), "message": (first.get("message") or "")[:200]},
            "points_at_the_line": any(d.get("line") == line for d in errors),
        }
        progress(f"{entry['candidate']}: {step} {report.get('verdict')} in {seconds:.1f} s (line {first.get('line')})")
    return steps


def markdown(result: dict) -> str:
    lines = [
        f"# CUDA sources with a host-code error ({result['label']})",
        "",
        f"`{result['command']}`; {result['when']}; {result['machine']}; code {result['commit']}.",
        "",
        f"One running server: its first verify ({result['warm_up']['source']}) took {result['warm_up']['seconds']:.1f} s.",
        "",
        "| source | break | first verify | again | verdict | points at the line | first error |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in result["sources"].items():
        if "skipped" in s:
            lines.append(f"| {name} | skipped: {s['skipped']} | | | | | |")
            continue
        first, again = s["first"], s.get("again")
        message = first["error"]["message"].replace("|", "\\|")
        again_s = f"{again['seconds']:.1f} s" if again else "-"
        lines.append(
            f"| {name} | {s['kind']} (line {s['line']}) | {first['seconds']:.1f} s | {again_s} "
            f"| {first['verdict']} | {first['points_at_the_line']} | line {first['error']['line']}: {message} |"
        )
    firsts = [s["first"]["seconds"] for s in result["sources"].values() if "first" in s]
    if firsts:
        lines += ["", f"First verify: median {statistics.median(firsts):.1f} s, {min(firsts):.1f}-{max(firsts):.1f} s."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", nargs="*", help="these corpus sources only (names without .py)")
    ap.add_argument("--label", default="", help="what this run is (default: the GPU's name)")
    ap.add_argument("--commit", default="", help="the product code's commit (default: this checkout's)")
    ap.add_argument("--once", action="store_true", help="each twin's first verify only")
    args = ap.parse_args()
    import torch

    import kforge_mcp

    server, warm = warm_server(["eager"])
    sources: dict = {}
    try:
        for index, entry in enumerate(CORPUS):
            name = entry["candidate"].removesuffix(".py")
            if args.only and name not in args.only:
                continue
            missing = missing_headers(entry)
            sources[name] = (
                {"skipped": f"lacks {missing}"}
                if missing
                else twin_steps(server, entry, index, ("first",) if args.once else ("first", "again"))
            )
    finally:
        server.close()
    commit = (
        args.commit
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    )
    result = {
        "label": args.label or (torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"),
        "command": "python bench/cuda_host_errors.py " + " ".join(sys.argv[1:]),
        "when": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.node()}, {torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}",
        "commit": commit,
        "product_code": os.path.relpath(Path(kforge_mcp.__file__).resolve().parent, ROOT),
        "warm_up": warm,
        "sources": sources,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
