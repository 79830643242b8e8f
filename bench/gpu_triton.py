"""The Triton target on a real GPU: every example through compile and verify (eager and
torch.compile baselines) via a real MCP client, repeat-verify stability, a CUDA fault
contained, and our candidate timing checked against triton.testing.do_bench.

    python bench/gpu_triton.py --out DIR      # on a machine with an NVIDIA GPU

Writes gpu-triton.json and gpu-triton.md to DIR.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.util
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from device_label import device_label
from mcp import Client

from kforge_mcp.api import Engine
from kforge_mcp.server import build_server

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["fused_bias_gelu", "row_softmax", "gemm_bias_relu"]
REPEATS = 3


def paths(name: str, candidate: str = "triton") -> tuple[str, str]:
    return (
        str(ROOT / "examples" / "problems" / f"{name}.py"),
        str(ROOT / "examples" / "candidates" / name / f"{candidate}.py"),
    )


async def through_mcp(server) -> dict:
    out: dict = {"examples": {}}
    async with Client(server) as client:
        t0 = time.perf_counter()
        targets = (await client.call_tool("list_targets", {})).structured_content
        out["list_targets"] = {"seconds": time.perf_counter() - t0, "report": targets}
        for name in EXAMPLES:
            prob, cand = paths(name)
            t0 = time.perf_counter()
            comp = (
                await client.call_tool("compile", {"target": "triton", "source": cand, "problem": prob})
            ).structured_content
            comp_s = time.perf_counter() - t0
            runs = []
            for _ in range(REPEATS):
                t0 = time.perf_counter()
                res = await client.call_tool("verify", {"problem": prob, "candidate": cand, "target": "triton"})
                runs.append({"wall_s": time.perf_counter() - t0, "report": res.structured_content})
            out["examples"][name] = {"compile": comp, "compile_wall_s": comp_s, "verify": runs}
        prob, cand = paths("fused_bias_gelu", "triton_wrong")
        out["wrong"] = (
            await client.call_tool(
                "verify", {"problem": prob, "candidate": cand, "target": "triton", "baselines": ["eager"]}
            )
        ).structured_content
        prob, _ = paths("row_softmax")
        fault = str(ROOT / "tests" / "candidates" / "illegal_address.py")
        out["cuda_fault"] = (
            await client.call_tool(
                "verify", {"problem": prob, "candidate": fault, "target": "triton", "baselines": ["eager"]}
            )
        ).structured_content
        _, cand = paths("row_softmax")
        t0 = time.perf_counter()
        after = (
            await client.call_tool("verify", {"problem": prob, "candidate": cand, "target": "triton"})
        ).structured_content
        out["after_fault"] = {"wall_s": time.perf_counter() - t0, "verdict": after["verdict"]}
    return out


def do_bench_check(name: str) -> dict:
    """Time the same ModelNew forward with triton.testing.do_bench in this process."""
    import triton.testing

    prob_path, cand_path = paths(name)
    mods = {}
    for key, path in (("problem", prob_path), ("candidate", cand_path)):
        spec = importlib.util.spec_from_file_location(f"bench_{key}", path)
        mods[key] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mods[key])
    torch.manual_seed(0)
    model = mods["candidate"].ModelNew(*mods["problem"].get_init_inputs()).cuda()
    torch.manual_seed(7)
    inputs = [x.cuda() for x in mods["problem"].get_inputs()]
    with torch.no_grad():
        ms = triton.testing.do_bench(lambda: model(*inputs), warmup=25, rep=100, return_mode="median")
    return {"do_bench_median_ms": ms}


def summarize(result: dict) -> str:
    lines = [
        "# Triton target on a GPU",
        "",
        f"- device: {result['device']}; torch {torch.__version__}; triton {result['triton']}; python {platform.python_version()}",
        f"- date: {result['date']}",
        "- command: `python bench/gpu_triton.py --out DIR` (through a real MCP client, in-process)",
        f"- list_targets first call: {result['mcp']['list_targets']['seconds']:.2f} s",
        "",
        "| problem | compile ok | regs | spills | smem B | verdicts | candidate median ms | eager ms | compiled ms | speedup (over) | speedup spread over repeats | verify wall s (first, warm) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, ex in result["mcp"]["examples"].items():
        comp = ex["compile"]
        k = comp["kernels"][0] if comp["kernels"] else {}
        reps = [r["report"] for r in ex["verify"]]
        speedups = [r["speedup"] for r in reps if r["speedup"]]
        t = reps[-1]["timing"]
        spread = (max(speedups) - min(speedups)) / statistics.median(speedups) if speedups else float("nan")
        lines.append(
            f"| {name} | {comp['ok']} | {k.get('registers')} | {k.get('spills')} | {k.get('shared_bytes')} | "
            f"{', '.join(r['verdict'] for r in reps)} | {t['candidate']['median_ms']:.4f} | {t['eager']['median_ms']:.4f} | "
            f"{t['compiled']['median_ms']:.4f} | {reps[-1]['speedup']:.2f} ({reps[-1]['speedup_over']}) | {spread:.1%} | "
            f"{ex['verify'][0]['wall_s']:.2f}, {ex['verify'][-1]['wall_s']:.2f} |"
        )
    lines += [
        "",
        "## Our timing against triton.testing.do_bench (same ModelNew, same inputs)",
        "",
        "| problem | kforge median ms (L2 flushed per call) | do_bench median ms | ratio |",
        "|---|---|---|---|",
    ]
    for name, check in result["do_bench"].items():
        ours = result["mcp"]["examples"][name]["verify"][-1]["report"]["timing"]["candidate"]["median_ms"]
        lines.append(
            f"| {name} | {ours:.4f} | {check['do_bench_median_ms']:.4f} | {ours / check['do_bench_median_ms']:.3f} |"
        )
    fault = result["mcp"]["cuda_fault"]
    lines += [
        "",
        "## Faults",
        "",
        f"- wrong candidate: verdict `{result['mcp']['wrong']['verdict']}`, max abs error {result['mcp']['wrong']['mismatches'][0]['max_abs_error']:.2e}",
        f"- illegal-address kernel: verdict `{fault['verdict']}`: {fault['errors'][0][:200]!r}",
        f"- next verify after the fault: `{result['mcp']['after_fault']['verdict']}` in {result['mcp']['after_fault']['wall_s']:.2f} s (a fresh worker)",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "gpu-triton"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs an NVIDIA GPU")
    import triton

    engine = Engine(home=tempfile.mkdtemp(prefix="kforge-gpu-bench-"))
    try:
        mcp_result = asyncio.run(through_mcp(build_server(engine)))
    finally:
        engine.close()
    result = {
        "device": torch.cuda.get_device_name(0),
        "triton": triton.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "mcp": mcp_result,
        "do_bench": {name: do_bench_check(name) for name in EXAMPLES},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{device_label()}.json").write_text(json.dumps(result, indent=1, default=str))
    (out / f"{device_label()}.md").write_text(summarize(result))
    print(summarize(result))


if __name__ == "__main__":
    main()
