"""An agent's feedback loop, timed through MCP: the real server over stdio, the SDK's client.

For each setting (``--settings stock,default``: ``stock`` runs CUDA builds the stock way,
``KFORGE_CUDA_BUILD=stock``; ``default`` is the server as shipped; ``no-warmup`` is the default without the GPU
warm-up at start, ``KFORGE_GPU_WARMUP=off``), a fresh server on a fresh home:

    connect + list_targets, CUDA verify (cold build, same source again, after a one-character
    kernel edit, after a host edit), compile of the edited source, Triton verify (first, warm)

``--think-s N`` waits N s after list_targets, as an agent writing its first kernel does; ``--cold-only``
stops after the cold CUDA verify; ``--first triton`` runs only Triton verifies (the first, then two warm), of
``--triton-problem`` / ``--triton-candidate`` where given. Wall seconds per call as the client sees them (a call that outlives its wait_s is followed with
job_result until done). Prints a markdown table and writes JSON.

    python bench/feedback_latency.py --out bench/results/feedback-latency/h100.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from cuda_build_time import wait_pch  # a sibling in bench/
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"
KERNEL_EDIT = ("0.5f * v * (1.0f", "0.5f * v * (1.00f")
HOST_EDIT = ("const int threads = 256;", "const int threads = 128;")
HOST_EDIT_2 = ("const int threads = 128;", "const int threads = 64;")


async def call(client: Client, tool: str, args: dict, timeline: list | None = None) -> tuple[float, dict]:
    t0 = time.perf_counter()

    async def progress(_done, _total, message):  # the server's progress messages, by time into the call
        if timeline is not None:
            timeline.append((round(time.perf_counter() - t0, 2), message))

    res = await client.call_tool(tool, args, progress_callback=progress)
    out = res.structured_content or {}
    while out.get("job_id") and out.get("status") in ("running", "queued"):
        res = await client.call_tool("job_result", {"job_id": out["job_id"], "wait_s": 50})
        info = res.structured_content or {}
        if info.get("status") not in ("running", "queued"):
            out = info.get("result") or info
            break
    return time.perf_counter() - t0, out


def summary(out: dict) -> str:
    build = next((f for f in out.get("findings", []) if f.get("code") == "cuda_build"), None)
    text = out.get("verdict", "ok" if out.get("ok") else "?")
    if build:
        ev = build.get("evidence", {})
        if ev.get("first_build"):  # the extension it loaded was built before (ahead, or an earlier verify)
            ev = ev["first_build"]
            text += f" (extension first built: {ev.get('path')} {ev.get('seconds', 0):.1f} s"
        else:
            text += f" ({ev.get('path')} build {ev.get('seconds', 0):.1f} s"
        text += f", compiled {'+'.join(ev['compiled'])}" if ev.get("compiled") else ""
        text += f", reused {'+'.join(ev['reused'])}" if ev.get("reused") else ""
        text += f", precompiled headers {ev['pch']}" if ev.get("pch") else ""
        text += ")"
    for f in out.get("findings", []):  # whether the kept baseline timings stood, and why not
        ev = f.get("evidence", {})
        if f.get("code") == "baselines_reused":
            text += f"; {ev.get('anchor')} timed now, moved {ev.get('factor', 1) - 1:+.1%} since kept"
            text += f", {'+'.join(ev['scaled'])} kept and scaled" if ev.get("scaled") else ""
        elif f.get("code") == "baselines_timed_again":
            text += f"; baselines timed again (anchor {ev.get('drift', 0):+.1%}, limit {ev.get('limit', 0):.0%})"
    return text


async def one_setting(
    name: str,
    extra_env: dict,
    triton: bool = True,
    think_s: float = 0,
    cold_only: bool = False,
    first: str = "cuda",
    triton_case: tuple[str, str] | None = None,
) -> list[dict]:
    home = tempfile.mkdtemp(prefix=f"kforge-latency-{name}-")
    env = {**os.environ, "KFORGE_HOME": home, **extra_env}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "kforge_mcp.cli", "serve", "--allow-dir", str(ROOT)], env=env, cwd=str(ROOT)
    )
    cuda_problem = triton_problem = str(EX / "problems/fused_bias_gelu.py")
    triton_path = str(EX / "candidates/fused_bias_gelu/triton.py")
    if triton_case:  # another problem for the Triton steps (a Level 2 GEMM, say)
        triton_problem, triton_path = triton_case
    cuda = (EX / "candidates/fused_bias_gelu/cuda.py").read_text()
    rows = []
    t0 = time.perf_counter()
    async with Client(params, mode="legacy") as client:
        _, targets = await call(client, "list_targets", {})
        rows.append({"step": "connect + list_targets", "seconds": time.perf_counter() - t0, "result": "ok"})
        has_gpu = any(t["name"] == "cuda" and t["available"] for t in targets.get("targets", []))
        if think_s:  # an agent writing its first kernel: the server's start-up work goes on meanwhile
            await asyncio.sleep(think_s)
            rows.append({"step": f"(the client thinks {think_s:g} s)", "seconds": think_s, "result": "-"})
        steps = []
        if has_gpu:
            kernel = cuda.replace(*KERNEL_EDIT)
            host = kernel.replace(*HOST_EDIT)
            steps += [
                ("CUDA verify, cold build", "verify", {"candidate": cuda, "target": "cuda"}),
                ("CUDA verify, same source again", "verify", {"candidate": cuda, "target": "cuda"}),
                ("CUDA verify after a one-character kernel edit", "verify", {"candidate": kernel, "target": "cuda"}),
                ("CUDA verify after a host (launch) edit", "verify", {"candidate": host, "target": "cuda"}),
                ("compile of the edited source", "compile", {"source": host, "target": "cuda", "arch": "sm_90a"}),
            ]
        triton_verify = {"candidate": triton_path, "target": "triton"}

        def triton_steps(first_label: str, warm: int) -> list:
            return [(first_label, "verify", triton_verify)] + [
                (f"Triton verify, warm ({i + 1})", "verify", triton_verify) for i in range(warm)
            ]

        if first == "triton":  # a fresh home's first verify is a Triton one: no build, only the baselines
            steps = triton_steps("Triton verify, fresh home", 2)
        elif cold_only:
            steps = steps[:1]
        elif triton:  # the build path does not touch Triton: 'stock' leaves these out to save GPU time
            steps += triton_steps("Triton verify, first", 3)
        for label, tool, args in steps:
            if tool == "verify":
                args = {"problem": triton_problem if args["target"] == "triton" else cuda_problem, **args}
            timeline: list = []
            seconds, out = await call(client, tool, args, timeline)
            rows.append({"step": label, "seconds": seconds, "result": summary(out), "timeline": timeline})
            rows[-1].update(worker_s=out.get("seconds"), phases=out.get("phases"))  # where the time went
            print(f"[{name}] {label}: {seconds:.2f} s  {summary(out)}  worker {out.get('phases')}", flush=True)
        # the edits above may come before the headers are precompiled: one more host edit once they are
        if has_gpu and name != "stock" and not cold_only and first == "cuda":
            waited = wait_pch(Path(home), limit_s=120)
            waited = round(waited, 1) if waited is not None else None
            label = "CUDA verify after another host edit, headers precompiled"
            edited = {"problem": cuda_problem, "candidate": host.replace(*HOST_EDIT_2), "target": "cuda"}
            seconds, out = await call(client, "verify", edited)
            rows.append({"step": label, "seconds": seconds, "result": summary(out), "waited_for_headers_s": waited})
            rows[-1].update(worker_s=out.get("seconds"), phases=out.get("phases"))
            print(f"[{name}] {label} (waited {waited} s for them): {seconds:.2f} s  {summary(out)}", flush=True)
    t0 = time.perf_counter()  # a new server on the same home: the last probe answers at once
    async with Client(params, mode="legacy") as client:
        await call(client, "list_targets", {})
        rows.append({"step": "connect + list_targets, a home probed before", "seconds": time.perf_counter() - t0})
        rows[-1]["result"] = "ok"
    print(f"[{name}] connect + list_targets again: {rows[-1]['seconds']:.2f} s", flush=True)
    return rows


def table(results: dict) -> str:
    names = list(results)
    steps = list(dict.fromkeys(r["step"] for n in names for r in results[n]))
    lines = ["| step | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for step in steps:
        cells = []
        for n in names:
            r = next((r for r in results[n] if r["step"] == step), None)
            cells.append(f"{r['seconds']:.2f} s: {r['result']}" if r else "-")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--settings", default="stock,default")
    ap.add_argument("--skip-triton", action="store_true", help="leave out the Triton steps (slow on a CPU)")
    ap.add_argument("--think-s", type=float, default=0, help="seconds between list_targets and the first verify")
    ap.add_argument("--cold-only", action="store_true", help="stop after the first (cold) CUDA verify")
    ap.add_argument("--first", choices=("cuda", "triton"), default="cuda", help="triton: only Triton verifies, first")
    ap.add_argument("--triton-problem", help="the Triton steps' problem (default: examples' fused_bias_gelu)")
    ap.add_argument("--triton-candidate", help="the Triton steps' candidate, with --triton-problem")
    args = ap.parse_args()
    # no-warmup: the server does not warm torch.compile on its first GPU at start (KFORGE_GPU_WARMUP=off)
    envs = {"stock": {"KFORGE_CUDA_BUILD": "stock"}, "default": {}, "no-warmup": {"KFORGE_GPU_WARMUP": "off"}}
    envs["one-compile-thread"] = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}  # inductor compiles in the GPU worker itself
    case = (
        (str(Path(args.triton_problem).resolve()), str(Path(args.triton_candidate).resolve()))
        if args.triton_problem
        else None
    )
    results = {}
    runs: dict[str, int] = {}  # a setting named again is run again, kept as "name (2)", ...
    for name in args.settings.split(","):
        triton = name != "stock" and not args.skip_triton
        runs[name] = runs.get(name, 0) + 1
        key = name if runs[name] == 1 else f"{name} ({runs[name]})"
        results[key] = asyncio.run(
            one_setting(name, envs[name], triton, args.think_s, args.cold_only, args.first, case)
        )
        Path(args.out).write_text(json.dumps(results, indent=1))
    print(table(results))
    Path(args.out).with_suffix(".md").write_text(table(results) + "\n")


if __name__ == "__main__":
    main()
