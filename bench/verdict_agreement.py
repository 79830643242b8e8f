"""Do CPU verdicts predict GPU verdicts? Every case of a small corpus (the examples, bench problems,
TF32 / 3xTF32 / bf16 / default-precision GEMM variants at several precisions, and a few cheats) is
verified with the same seed on each device; a case agrees when the verdicts are equal.

    python bench/verdict_agreement.py --device cpu --out cpu.json        # Triton's interpreter
    python bench/verdict_agreement.py --device cuda:0 --out gpu.json     # on the GPU
    python bench/verdict_agreement.py --compare cpu.json gpu.json        # markdown table + agreement

On a CUDA device it also measures how the tensor cores round fp32 operands of a single-pass TF32
tl.dot (truncation or round-to-nearest), against kforge's emulation of both (``tf32_rounding``).
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

EX, BP, BC = "examples/problems", "bench/problems", "bench/candidates"
EC, CH = "examples/candidates", "tests/cheats"
GEMM_VARIANTS = (
    "triton",
    "triton_naive",
    "triton_3xtf32",
    "triton_3xtf32_fed",
    "triton_tf32",
    "triton_ieee",
    "triton_bf16",
)
CASES = (
    [
        (f"{EX}/fused_bias_gelu.py", f"{EC}/fused_bias_gelu/{c}.py", None)
        for c in ("triton", "triton_naive", "triton_wrong", "triton_crash")
    ]
    + [(f"{EX}/row_softmax.py", f"{EC}/row_softmax/{c}.py", None) for c in ("triton", "triton_naive")]
    + [(f"{EX}/gemm_bias_relu.py", f"{EC}/gemm_bias_relu/{c}.py", None) for c in GEMM_VARIANTS]
    + [
        (f"{EX}/gemm_bias_relu.py", f"{EC}/gemm_bias_relu/{c}.py", "tf32")
        for c in ("triton_tf32", "triton_3xtf32", "triton_bf16")
    ]
    + [(f"{EX}/gemm_bias_relu.py", f"{EC}/gemm_bias_relu/{c}.py", "bf16") for c in ("triton_bf16", "triton_tf32")]
    + [
        (f"{BP}/matmul_small.py", f"{BC}/matmul_small/{c}.py", p)
        for c in ("triton_default", "triton_ieee", "triton_tf32x3", "triton_bf16")
        for p in (None, "tf32")
    ]
    + [(f"{BP}/matmul_small.py", f"{BC}/matmul_small/triton_bf16.py", "bf16")]
    + [(f"{BP}/vector_add.py", f"{BC}/vector_add/triton.py", None)]
    + [
        (f"{CH}/problem.py", f"{CH}/{c}.py", None)
        for c in ("honest", "memo_pointer", "memo_fingerprint", "wrong_after_timing", "fixed_shape", "mutate_input")
    ]
    + [(f"{CH}/bn_problem.py", f"{CH}/{c}.py", None) for c in ("bn_honest", "bn_stateless")]
)


def case_id(problem: str, candidate: str, precision: str | None) -> str:
    return f"{Path(problem).stem}/{Path(candidate).stem}@{precision or 'default'}"


def run_cases(device: str, only: str | None) -> list[dict]:
    from kforge_mcp.api import Engine

    engine = Engine(allow_dirs=[ROOT, "/tmp"])
    rows = []
    try:
        for i, (problem, candidate, precision) in enumerate(CASES):
            cid = case_id(problem, candidate, precision)
            if only and only not in cid:
                continue
            started = time.perf_counter()
            r = engine.verify(
                str(ROOT / problem),
                str(ROOT / candidate),
                target="triton",
                device=device,
                trials=3,
                baselines=["eager"],
                timing_budget_s=0.2,
                precision=precision,
                seed=1000 + i,  # one seed per case on every device (each device draws from its own generator)
            )
            rows.append(
                {
                    "case": cid,
                    "verdict": r.verdict,
                    "precision": r.precision,
                    "atol": r.atol,
                    "max_abs_error": r.mismatches[0].max_abs_error if r.mismatches else None,
                    "findings": [f"{f.code}:{f.severity}" for f in r.findings],
                    "errors": [e[:200] for e in r.errors if e][:2],
                    "seconds": round(time.perf_counter() - started, 1),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    finally:
        engine.close()
    return rows


def tf32_rounding() -> dict:
    """A single-pass TF32 tl.dot on the GPU against kforge's emulation with each rounding mode."""
    import numpy as np
    import torch
    import triton
    import triton.language as tl

    from kforge_mcp.targets.triton.precision import emulated_product, tf32

    @triton.jit
    def dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr, PRECISION: tl.constexpr):
        r = tl.arange(0, N)
        a = tl.load(a_ptr + r[:, None] * N + r[None, :])
        b = tl.load(b_ptr + r[:, None] * N + r[None, :])
        tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b, input_precision=PRECISION))

    n, out = 64, {}
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    exact = a.double().numpy() @ b.double().numpy()
    for precision in ("tf32", "tf32x3"):
        c = torch.empty(n, n, device="cuda")
        dot_kernel[(1,)](a.cuda(), b.cuda(), c, N=n, PRECISION=precision)
        gpu = c.cpu().double().numpy()
        name = {"tf32": "TF32", "tf32x3": "TF32x3"}[precision]
        row = {"gpu_mean_abs_error": float(np.abs(gpu - exact).mean())}
        if precision == "tf32":
            for mode in ("truncate", "nearest"):
                emu = np.matmul(tf32(a.numpy(), mode), tf32(b.numpy(), mode), dtype=np.float32).astype(np.float64)
                row[f"{mode}_mean_abs_error"] = float(np.abs(emu - exact).mean())
                row[f"gpu_vs_{mode}_max_diff"] = float(np.abs(gpu - emu).max())
        else:
            emu = emulated_product(a.numpy(), b.numpy(), name).astype(np.float64)
            row["emulated_mean_abs_error"] = float(np.abs(emu - exact).mean())
            row["gpu_vs_emulated_max_diff"] = float(np.abs(gpu - emu).max())
        out[precision] = row
    return out


def compare(cpu_path: str, gpu_path: str) -> str:
    cpu, gpu = (json.loads(Path(p).read_text()) for p in (cpu_path, gpu_path))
    by_gpu = {r["case"]: r for r in gpu["cases"]}
    lines = [
        "# CPU verdicts against GPU verdicts (bench/verdict_agreement.py)",
        "",
        f"- CPU: {cpu['device_name']} ({cpu['date']}); GPU: {gpu['device_name']} ({gpu['date']})",
        "- each case verified with the same seed on both, trials 3; inputs and weights are drawn on each device's own "
        "generator, so the errors differ where the verdicts agree",
        "",
        "| case | CPU | GPU | equal | CPU max err | GPU max err | CPU findings | GPU findings |",
        "|---|---|---|---|---|---|---|---|",
    ]
    equal = total = 0
    for r in cpu["cases"]:
        g = by_gpu.get(r["case"])
        if g is None:
            continue
        total += 1
        same = r["verdict"] == g["verdict"]
        equal += same

        def err(x):
            return "-" if x["max_abs_error"] is None else f"{x['max_abs_error']:.2e}"

        def fs(x):
            return ", ".join(f for f in x["findings"] if not f.endswith(":info")) or "-"

        lines.append(
            f"| {r['case']} | {r['verdict']} | {g['verdict']} | {'yes' if same else '**no**'} | {err(r)} | {err(g)} "
            f"| {fs(r)} | {fs(g)} |"
        )
    lines += ["", f"**Equal verdicts: {equal}/{total} ({100 * equal / max(total, 1):.1f}%)**", ""]
    if gpu.get("tf32_rounding"):
        lines += [
            "## How the GPU rounds TF32 operands",
            "",
            "```",
            json.dumps(gpu["tf32_rounding"], indent=2),
            "```",
            "",
        ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out")
    ap.add_argument("--only", help="run the cases whose id contains this")
    ap.add_argument("--compare", nargs=2, metavar=("CPU_JSON", "GPU_JSON"))
    args = ap.parse_args()
    if args.compare:
        print(compare(*args.compare))
        return
    import platform

    import torch

    record = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": args.device,
        "device_name": torch.cuda.get_device_name(0)
        if args.device.startswith("cuda")
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cases": run_cases(args.device, args.only),
    }
    if args.device.startswith("cuda"):
        record["tf32_rounding"] = tf32_rounding()
    Path(args.out or f"agreement-{args.device.replace(':', '')}.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
