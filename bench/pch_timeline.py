"""When the precompiled headers land, against a fresh server's first CUDA verifies (a GPU machine).

One engine on a fresh home: list_targets (the probe starts the headers' precompilation), then the corpus's
first sources verified one after the other. Prints, in seconds from the engine's start, each verify's start
and end and its units' seconds and header status, and when each precompiled header was started and ready.

    python bench/pch_timeline.py [--probe-first] [--only a,b]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from cuda_fast_build import CORPUS_DIR, WARM_UP, Server, build_summary

CORPUS = json.loads((CORPUS_DIR / "corpus.json").read_text())["sources"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe-first", action="store_true", help="list_targets before the first verify")
    ap.add_argument("--only", default="kernelbench_add,kernelbench_fuse_gelu,kernelbench_tiled_matmul")
    args = ap.parse_args()
    t0 = time.time()
    server = Server()
    home = Path(server.tmp.name) / "home"
    lines = []
    if args.probe_first:
        server.engine.list_targets()
        lines.append(f"{time.time() - t0:6.1f} list_targets answered")
    todo = [("warm_up", str(WARM_UP[0]), WARM_UP[1].read_text())]
    only = args.only.split(",")
    todo += [
        (e["candidate"], str(CORPUS_DIR / e["problem"]), (CORPUS_DIR / e["candidate"]).read_text())
        for e in CORPUS
        if e["candidate"].removesuffix(".py") in only
    ]
    for name, problem, text in todo:
        start = time.time() - t0
        seconds, report = server.verify(problem, f"t_{name}", text, ["eager"])
        b = build_summary(report.get("findings", []))
        b = b.get("first_build") or b
        lines.append(
            f"{start:6.1f}-{time.time() - t0:6.1f} {name}: {report.get('verdict')} {seconds:.1f} s "
            f"compiled {json.dumps(b.get('compiled'))} pch {json.dumps(b.get('pch'))} phases {json.dumps(report.get('phases'))}"
        )
    for ok in sorted(home.rglob("*.gch.ok")):
        header = ok.parent / ok.name.removesuffix(".gch.ok")
        lines.append(f"{header.stat().st_mtime - t0:6.1f} -> {ok.stat().st_mtime - t0:6.1f} {ok.parent.name[:40]}")
    for d in sorted(home.rglob("pch-*")):
        if d.is_dir() and not any(d.glob("*.gch.ok")):
            lines.append(f"not ready: {d.name[:40]} {[p.name for p in d.iterdir()]}")
    print("\n".join(lines))
    server.close()


if __name__ == "__main__":
    main()
