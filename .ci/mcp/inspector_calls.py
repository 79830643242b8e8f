"""The MCP Inspector's CLI against a running `kforge serve --transport http`: tools/list, then one
tools/call of every tool listed, each checked for what it must answer. Called by .ci/mcp-conformance.

    python .ci/mcp/inspector_calls.py URL NODE INSPECTOR_CLI_JS
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

PROBLEM, CANDIDATE = "examples/problems/row_softmax.py", "examples/candidates/row_softmax/triton.py"
SUITE = ".ci/mcp/suite"
QUICK = {"target": "triton", "baselines": ["eager"], "trials": 1, "wait_s": 300}


def inspector(url: str, node: str, cli: str, method: str, tool: str | None = None, **args) -> dict:
    cmd = [node, cli, "--cli", url, "--transport", "http", "--method", method]
    if tool:
        cmd += ["--tool-name", tool]
    for key, value in args.items():
        cmd += ["--tool-arg", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"inspector {method} {tool or ''} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    print(f"inspector {method} {tool or ''}: {time.monotonic() - started:.1f} s", flush=True)
    return json.loads(done.stdout)


def main(url: str, node: str, cli: str) -> int:
    listed = {t["name"] for t in inspector(url, node, cli, "tools/list")["tools"]}

    def call(tool: str, **args) -> dict:
        return inspector(url, node, cli, "tools/call", tool, **args)

    def ok(tool: str, **args) -> dict:
        result = call(tool, **args)
        if result.get("isError"):
            raise SystemExit(f"{tool}: unexpected tool error: {result['content']}")
        return result["structuredContent"]

    called, failures = set(), []

    def check(tool: str, condition: bool, what: str) -> None:
        called.add(tool)
        if not condition:
            failures.append(f"{tool}: {what}")

    targets = ok("list_targets")["targets"]
    check("list_targets", any(t["name"] == "triton" and t["available"] for t in targets), "triton available")
    built = ok("compile", target="triton", source=CANDIDATE, problem=PROBLEM, wait_s=300)
    check("compile", built["ok"] and built["kernels"], f"ok with kernels: {built}")
    report = ok("verify", problem=PROBLEM, candidate=CANDIDATE, **QUICK)
    check("verify", report["verdict"] == "pass", f"verdict pass: {report.get('verdict')}")
    batch = ok("verify_batch", items=[{"problem": PROBLEM, "candidate": CANDIDATE}], **QUICK)
    check("verify_batch", batch["reports"][0]["verdict"] == "pass", f"one pass: {batch.get('summary')}")
    # a suite of one problem and one candidate (.ci/mcp/suite links to the examples)
    suite = ok("bench", problems=f"{SUITE}/problems", candidates=f"{SUITE}/candidates", **QUICK)["bench"]["suite"]
    check("bench", (suite["problems"], suite["correct"]) == (1, 1), f"one problem, correct: {suite}")
    prof = ok("profile", problem=PROBLEM, target="triton", iterations=1, wait_s=300)
    check("profile", prof["kernels"] or prof.get("ops") or prof.get("roofline"), "kernels or a roofline")
    advice = ok("analyze_profile", path="tests/data/profiles/fused_bias_gelu-triton_naive.ncu-raw.csv")
    check("analyze_profile", advice["recommendations"], "recommendations")
    job = ok("verify", problem=PROBLEM, candidate=CANDIDATE, **{**QUICK, "wait_s": 0})["job_id"]
    check("job_status", ok("job_status", job_id=job)["job_id"] == job, "its job")
    check("job_result", ok("job_result", job_id=job, wait_s=55)["status"] in ("done", "running"), "done")
    check("job_cancel", ok("job_cancel", job_id=job)["job_id"] == job, "its job")
    run = ok(
        "loop_start", problem=PROBLEM, target="triton", max_iterations=2, baselines=["eager"], trials=1, profile=False
    )
    check("loop_start", run["run_id"] and run["prompt"], "a run and a prompt")
    source = open(CANDIDATE).read()
    step = ok("loop_submit", run_id=run["run_id"], candidate=f"```python\n{source}\n```", wait_s=300)
    check("loop_submit", step["verdict"] == "pass", f"the attempt passes: {step.get('verdict')} {step.get('error')}")
    # run_loop drives the client's own model through sampling, which the Inspector's CLI does not
    # offer: the answer must be a tool error that says so (not a crash, not a hang)
    refused = call("run_loop", problem=PROBLEM, target="triton", max_iterations=1, wait_s=60)
    text = json.dumps(refused["content"])
    check("run_loop", refused.get("isError") and "sampling" in text, f"a tool error naming sampling: {text[:300]}")
    missing = listed - called
    if missing or failures:
        print("FAILED:", *failures, *(f"{t}: not called" for t in sorted(missing)), sep="\n  ")
        return 1
    print(f"inspector: tools/list and one tools/call of each of the {len(listed)} tools: all as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
