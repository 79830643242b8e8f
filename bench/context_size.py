"""What an agent's context pays for kforge: the size of ``tools/list`` (every tool's description, input
and output schema) and of a verify, a profile and an analyze_profile result, text and structured
content apart, through the real server and the SDK's client in-process.

    python bench/context_size.py --before OLD.json --out bench/results/context-size/cpu.json \
        --md bench/results/context-size/cpu.md

Sizes are characters of compact JSON (what goes over the wire); text is the sum of a result's text
blocks, the part most hosts put before the model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import time
from pathlib import Path

from mcp import Client

import kforge_mcp

ROOT = Path(kforge_mcp.__file__).resolve().parents[1]  # the checkout measured: its examples, its allowed folder
PROBLEM = ROOT / "examples" / "problems" / "row_softmax.py"
CANDIDATE = ROOT / "examples" / "candidates" / "row_softmax" / "triton.py"
QUICK = {"trials": 2, "baselines": ["eager"], "wait_s": 600}


def compact(value) -> int:
    return len(json.dumps(value, separators=(",", ":")))


def result_sizes(result) -> dict:
    text = sum(len(c.text) for c in result.content if getattr(c, "type", None) == "text")
    return {
        "error": result.is_error,
        "text": "".join(c.text for c in result.content if getattr(c, "type", None) == "text"),
        "text_chars": text,
        "structured_chars": compact(result.structured_content) if result.structured_content else 0,
        "blocks": [c.type for c in result.content],
    }


async def measure(home: str) -> dict:
    from kforge_mcp.api import Engine
    from kforge_mcp.server import build_server

    engine = Engine(home=home)
    try:
        async with Client(build_server(engine)) as client:
            listed = await client.list_tools()
            wire = listed.model_dump(by_alias=True, mode="json", exclude_none=True)
            tools = {
                t["name"]: {
                    "description": len(t.get("description", "")),
                    "input_schema": compact(t.get("inputSchema", {})),
                    "output_schema": compact(t.get("outputSchema", {})),
                    "all": compact(t),
                }
                for t in wire["tools"]
            }
            args = {"problem": str(PROBLEM), "candidate": str(CANDIDATE), "target": "triton"}
            started = time.perf_counter()
            verify = await client.call_tool("verify", {**args, **QUICK})
            profile = await client.call_tool("profile", {**args, "wait_s": 600})
            analysis = await client.call_tool("analyze_profile", {"profile": profile.structured_content})
            seconds = time.perf_counter() - started
    finally:
        engine.close()
    return {
        "tools_list_chars": compact(wire),
        "tools": tools,
        "verify": {**result_sizes(verify), "verdict": (verify.structured_content or {}).get("verdict")},
        "profile": result_sizes(profile),
        "analyze_profile": result_sizes(analysis),
        "calls_s": round(seconds, 1),
    }


def table(before: dict | None, after: dict) -> str:
    """The record as markdown: each size before (another record, e.g. of an earlier commit) and now."""
    runs = [r for r in (before, after) if r]
    names = [r["label"] for r in runs]
    sizes = [("tools/list", ("tools_list_chars",))]
    sizes += [
        (f"{c} {kind}", (c, f"{kind}_chars"))
        for c in ("verify", "profile", "analyze_profile")
        for kind in ("text", "structured")
    ]
    lines = [
        "# Context an agent pays: tools/list and three results",
        "",
        f"`python bench/context_size.py`: the real server and the SDK's client in-process; the calls are a verify and a "
        f"profile of `{CANDIDATE.relative_to(ROOT)}` on `{PROBLEM.relative_to(ROOT)}` (CPU, Triton interpreter) and "
        "analyze_profile of that profile. Characters of compact JSON, as on the wire; text: the result's text blocks. "
        + "; ".join(f"{r['label']}: {r['date']}" for r in runs),
        "",
        f"| characters | {' | '.join(names)} |",
    ]
    lines += ["| --- |" + " ---: |" * len(runs)]
    lines += [f"| {name} | {' | '.join(str(dig(r, path)) for r in runs)} |" for name, path in sizes]
    parts = ("all", "input_schema", "output_schema")
    lines += ["", "Each tool in tools/list: its whole entry, its input schema and its output schema.", ""]
    lines += ["| tool | " + " | ".join(f"{p} ({n})" for p in parts for n in names) + " |"]
    lines += ["| --- |" + " ---: |" * len(parts) * len(runs)]
    for tool in sorted(after["tools"]):
        lines.append(f"| `{tool}` | " + " | ".join(str(dig(r, ("tools", tool, p))) for p in parts for r in runs) + " |")
    return "\n".join(lines) + "\n"


def dig(record: dict, path: tuple[str, ...]):
    for key in path:
        record = record.get(key, {}) if isinstance(record, dict) else {}
    return record if record != {} else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the record here (JSON)")
    ap.add_argument("--before", help="a record of an earlier run (e.g. another commit) to compare with")
    ap.add_argument("--md", help="write the comparison here (markdown)")
    ap.add_argument("--label", default="", help="what this run measures, kept in the record (e.g. a commit)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kforge-context-") as home:
        record = asyncio.run(measure(home))
    record |= {"label": args.label, "date": time.strftime("%Y-%m-%d"), "python": platform.python_version()}
    before = json.loads(Path(args.before).read_text()) if args.before else None
    if before is not None:
        record["before"] = {k: v for k, v in before.items() if k != "before"}
    print(f"tools/list: {record['tools_list_chars']} chars")
    for name, sizes in sorted(record["tools"].items(), key=lambda kv: -kv[1]["all"]):
        print(f"  {name:<16} {sizes['all']:>7}  (input {sizes['input_schema']}, output {sizes['output_schema']})")
    for call in ("verify", "profile", "analyze_profile"):
        r = record[call]
        print(f"{call}: text {r['text_chars']} chars, structured {r['structured_chars']} chars")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    if args.md:
        Path(args.md).write_text(table(before, record))


if __name__ == "__main__":
    main()
