"""Client-driven loop trajectories: an MCP client drives loop_start / loop_submit on each problem
and we record what the loop saw and said per attempt (verdict, speedup, the analysis agent's top
advice, the first lines of its feedback).

The client's "model" is a replay of project-written candidates, not an LLM (the GPU machine has no
network): per problem it submits a broken naive kernel (a syntax error), for fused_bias_gelu a
wrong one, then the naive kernel, and then it follows the analysis agent: each round it reads the
top recommendation and submits the candidate written for that advice (FOLLOW below; e.g. the
GEMM's use_tensor_cores -> a 3xTF32 kernel, feed_tensor_pipe -> bigger tiles and a deeper
pipeline), or the generic tuned one (examples/candidates/<problem>/triton.py) when no candidate
answers the advice, until the agent says stop or nothing is left. What is measured is the loop
itself: feedback reaching the next prompt, verification, profiling and advice on the real device.

    python bench/loop_trajectories.py --out bench/results/loop-trajectories [--large]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from device_label import device_label  # noqa: E402
from mcp import Client  # noqa: E402

from kforge_mcp.api import Engine  # noqa: E402
from kforge_mcp.server import build_server  # noqa: E402

PROBLEMS = ("fused_bias_gelu", "row_softmax", "gemm_bias_relu")


def broken(source: str) -> str:
    """The same module with the colon of ``def forward`` dropped: a compile error on a known line."""
    return source.replace("def forward(self", "def forward (self", 1).replace("):\n", ")\n", 1)


# top recommendation's rule -> the candidate written to follow it (under bench/candidates/<problem>_large/)
FOLLOW = {"gemm_bias_relu": {"use_tensor_cores": "triton_3xtf32.py", "feed_tensor_pipe": "triton_3xtf32_fed.py"}}
MAX_FOLLOW = 3


def script(name: str) -> list[tuple[str, str]]:
    cands = ROOT / "examples" / "candidates" / name
    naive = (cands / "triton_naive.py").read_text()
    steps = [("syntax error", broken(naive))]
    if (cands / "triton_wrong.py").is_file():
        steps.append(("wrong result", (cands / "triton_wrong.py").read_text()))
    return steps + [("naive", naive)]


def follow(name: str, top_rule: str | None, used: set[str]) -> tuple[str, str] | None:
    """The next candidate: the one written for the top advice, else the generic tuned one, once each."""
    pick = FOLLOW.get(name, {}).get(top_rule or "")
    path = ROOT / "bench" / "candidates" / f"{name}_large" / pick if pick else None
    if path is None or not path.is_file() or pick in used:
        pick, path = "triton.py", ROOT / "examples" / "candidates" / name / "triton.py"
    if pick in used:
        return None
    used.add(pick)
    return f"{pick} (following {top_rule or 'no advice'})", path.read_text()


def problem_path(name: str, large: bool) -> Path:
    return ROOT / "bench" / "problems" / f"{name}_large.py" if large else ROOT / "examples" / "problems" / f"{name}.py"


async def trajectory(client, name: str, large: bool, target: str) -> dict:
    steps = script(name)
    start = await client.call_tool(
        "loop_start",
        {
            "problem": str(problem_path(name, large)),
            "target": target,
            "max_iterations": len(steps) + MAX_FOLLOW,
            "stop_at_sol": None,
        },
    )
    if start.is_error:
        raise SystemExit(f"loop_start failed: {start.content[0].text}")
    run_id = start.structured_content["run_id"]
    attempts, used, queue = [], set(), list(steps)
    while queue:
        label, source = queue.pop(0)
        t0 = time.perf_counter()
        reply = f"Attempt: {label}.\n\n```python\n{source}```\n"
        r = await client.call_tool("loop_submit", {"run_id": run_id, "candidate": reply, "wait_s": 3000})
        if r.is_error:
            attempts.append({"submitted": label, "tool_error": r.content[0].text})
            break
        s = r.structured_content
        v = s.get("verify_report") or {}
        recs = s.get("recommendations") or []
        attempts.append(
            {
                "submitted": label,
                "verdict": s["verdict"],
                "correct": s["correct"],
                "speedup": s.get("speedup"),
                "speedup_ci": v.get("speedup_ci"),
                "candidate_ms": ((v.get("timing") or {}).get("candidate") or {}).get("median_ms"),
                "fraction_of_sol": v.get("fraction_of_sol"),
                "findings": [f.get("code") for f in v.get("findings", [])],
                "top_advice": [
                    f"{x['rule']}: {x['title']}"[:160] if "rule" in x else x.get("_summary", "")[:160] for x in recs[:2]
                ],
                "feedback": "\n".join((s.get("feedback") or "").splitlines()[:4]),
                "next_prompt_has_feedback": bool(s.get("next_prompt"))
                and (s.get("feedback") or "")[:60] in s["next_prompt"],
                "seconds": round(time.perf_counter() - t0, 2),
                "done": s["done"],
                "stop_reason": s.get("stop_reason"),
            }
        )
        if s["done"]:
            break
        if not queue and s["correct"] and len(used) < MAX_FOLLOW:
            top = next((x for x in recs if "rule" in x), None)
            nxt = follow(name, top and top["rule"], used)
            if nxt is not None:
                queue.append(nxt)
    best = (attempts and s.get("best")) or None
    return {
        "problem": name,
        "problem_file": str(problem_path(name, large).relative_to(ROOT)),
        "target": target,
        "run_id": run_id,
        "attempts": attempts,
        "best_index": best and best["index"],
        "best_speedup": best and best.get("speedup"),
    }


def markdown(runs: list[dict], device: str) -> str:
    lines = [
        f"# Client-driven loop trajectories ({device})",
        "",
        "An MCP client drives `loop_start` / `loop_submit`; its replies are project-written candidates "
        "(see bench/loop_trajectories.py), so this measures the loop, not a model.",
        "",
    ]
    for run in runs:
        lines += [
            f"## {run['problem']} ({run['problem_file']}, {run['target']}), run {run['run_id']}",
            "",
            "| # | submitted | verdict | speedup (95% CI) | candidate ms | top advice |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for i, a in enumerate(run["attempts"]):
            ci = a.get("speedup_ci")
            sp = f"{a['speedup']:.2f}x" if a.get("speedup") else "-"
            sp += f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci else ""
            ms = f"{a['candidate_ms']:.4f}" if a.get("candidate_ms") else "-"
            advice = (
                "<br>".join(a.get("top_advice") or []) or " ".join((a.get("feedback") or "").splitlines()[:2])[:140]
            )
            lines.append(
                f"| {i} | {a['submitted']} | {a.get('verdict', a.get('tool_error'))} | {sp} | {ms} | {advice} |"
            )
        stop = next((a.get("stop_reason") for a in reversed(run["attempts"]) if a.get("stop_reason")), None)
        lines += [
            "",
            f"Best: attempt {run['best_index']}, {run['best_speedup']}x." + (f" Stopped: {stop}." if stop else ""),
            "",
        ]
    return "\n".join(lines) + "\n"


async def main_async(args) -> None:
    home = Path(args.home or tempfile.mkdtemp(prefix="kforge-traj-"))
    engine = Engine(home=home, allow_dirs=[ROOT])
    server = build_server(engine)
    runs = []
    try:
        async with Client(server) as client:
            targets = (await client.call_tool("list_targets", {})).structured_content
            device = next((t["devices"] for t in targets["targets"] if t["name"] == args.target), ["?"])
            host = targets.get("host", {})
            for name in args.problems:
                print(f"== {name}", flush=True)
                runs.append(await trajectory(client, name, args.large, args.target))
                for a in runs[-1]["attempts"]:
                    print(
                        f"   {a['submitted']:<30} {a.get('verdict')} {a.get('speedup')} {a.get('top_advice')}",
                        flush=True,
                    )
    finally:
        engine.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = f"{host.get('gpu') or host.get('device_name') or device}"
    (out / f"{device_label()}.json").write_text(json.dumps({"host": host, "devices": device, "runs": runs}, indent=1))
    (out / f"{device_label()}.md").write_text(markdown(runs, dev))
    print((out / f"{device_label()}.md").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results/loop-trajectories")
    ap.add_argument("--target", default="triton")
    ap.add_argument("--problems", nargs="+", default=list(PROBLEMS))
    ap.add_argument("--large", action="store_true", help="the kernel-dominated shapes in bench/problems/*_large.py")
    ap.add_argument("--home", help="KFORGE_HOME for the run (default: a fresh temp dir)")
    anyio.run(main_async, ap.parse_args())


if __name__ == "__main__":
    main()
