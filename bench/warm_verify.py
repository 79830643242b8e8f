"""Warm verify through MCP: the same verify called several times in a row on one in-memory SDK client
and a fresh home; wall seconds per call as the client sees them, with the worker's phases.

    python bench/warm_verify.py --device cpu --out bench/results/warm-verify/cpu.json
    cd OTHER && PYTHONPATH=OTHER python /path/to/bench/warm_verify.py --label before --out ...  # another checkout

The out file keeps each label's calls (a run replaces its label's). Another checkout runs from its own folder: the
workers start there and import its kforge_mcp.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from mcp import Client

ROOT = Path(__file__).resolve().parent.parent


async def run(args) -> list[dict]:
    from kforge_mcp.api import Engine
    from kforge_mcp.server import build_server

    home = Path(tempfile.mkdtemp(prefix="kforge-warm-verify-"))
    engine = Engine(home=home, allow_dirs=[ROOT, home])
    rows = []
    try:
        async with Client(build_server(engine)) as client:
            for i in range(args.calls):
                started = time.perf_counter()
                res = await client.call_tool(
                    "verify",
                    {"problem": args.problem, "candidate": args.candidate, "target": "triton", "device": args.device},
                )
                out = res.structured_content or {}
                rows.append(
                    {
                        "call": i + 1,
                        "seconds": round(time.perf_counter() - started, 2),
                        "verdict": out.get("verdict"),
                        "phases": out.get("phases"),
                        "findings": [f["code"] for f in out.get("findings", [])],
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    finally:
        engine.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", default=str(ROOT / "bench/problems/vector_add.py"))
    ap.add_argument("--candidate", default=str(ROOT / "bench/candidates/vector_add/triton.py"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--calls", type=int, default=6)
    ap.add_argument("--label", default="after", help="the name these calls are kept under in the out file")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    record = json.loads(args.out.read_text()) if args.out.is_file() else {}
    record = record if isinstance(record, dict) else {}
    record[args.label] = asyncio.run(run(args))
    args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
