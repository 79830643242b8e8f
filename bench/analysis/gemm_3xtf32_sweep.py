"""Tile configs of the 3xTF32 GEMM + bias + ReLU candidate (examples/candidates/gemm_bias_relu/triton_3xtf32.py)
on the H100, against cuBLAS fp32 (TF32 off) and torch.compile of the reference: which config the
'feed the tensor pipe' advice (bigger tiles, deeper pipeline) should land on, measured, not guessed.

    PYTHONPATH=$PWD python bench/analysis/gemm_3xtf32_sweep.py [--out FILE.json]

Times are triton.testing.do_bench medians (it clears a 256 MB L2 buffer before each call); the error is
the max |candidate - fp32 cuBLAS| and whether it passes 1e-4 (KernelBench's fp32 tolerance).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
CAND = ROOT / "examples" / "candidates" / "gemm_bias_relu" / "triton_3xtf32.py"
SHAPES = [(2048, 2048, 2048), (1024, 8192, 8192)]  # bench/problems/gemm_bias_relu_large.py, the L2 Gemm_Add_ReLU shape
CONFIGS = [  # BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages
    (128, 128, 32, 8, 3),
    (128, 128, 32, 4, 3),
    (128, 128, 32, 8, 4),
    (128, 256, 32, 8, 3),
    (128, 256, 32, 8, 4),
    (256, 128, 32, 8, 3),
    (128, 128, 64, 8, 3),
    (64, 128, 32, 4, 4),
    (128, 64, 32, 4, 4),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    args = ap.parse_args()
    spec = importlib.util.spec_from_file_location("cand", CAND)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    kernel = mod.linear_relu_3xtf32_kernel
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for m, n, k in SHAPES:
        torch.manual_seed(0)
        x = torch.randn(m, k, device="cuda")
        lin = torch.nn.Linear(k, n).cuda()
        w, b = lin.weight.detach(), lin.bias.detach()

        def ref():
            return torch.relu(torch.nn.functional.linear(x, w, b))

        expect = ref()
        compiled = torch.compile(ref)
        compiled()
        base = {"eager": triton.testing.do_bench(ref), "compiled": triton.testing.do_bench(compiled)}
        print(f"{m}x{n}x{k}: eager {base['eager']:.4f} ms, compiled {base['compiled']:.4f} ms", flush=True)
        for bm, bn, bk, warps, stages in CONFIGS:
            out = torch.empty(m, n, device="cuda")
            grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)

            def run():
                kernel[grid](
                    x,
                    w,
                    b,
                    out,
                    m,
                    n,
                    k,
                    x.stride(0),
                    x.stride(1),
                    w.stride(0),
                    w.stride(1),
                    out.stride(0),
                    out.stride(1),
                    BLOCK_M=bm,
                    BLOCK_N=bn,
                    BLOCK_K=bk,
                    GROUP_M=8,
                    num_warps=warps,
                    num_stages=stages,
                )

            try:
                run()
                torch.cuda.synchronize()
                err = (out - expect).abs().max().item()
                ok = torch.allclose(out, expect, atol=1e-4, rtol=1e-4)
                ms = triton.testing.do_bench(run)
            except Exception as e:  # noqa: BLE001  (an out-of-resources config is a row, not a crash)
                rows.append({"shape": [m, n, k], "config": [bm, bn, bk, warps, stages], "error": str(e)[:200]})
                print(f"  {bm}x{bn}x{bk} w{warps} s{stages}: {str(e)[:100]}", flush=True)
                continue
            tflops = 2 * m * n * k / ms / 1e9
            row = {
                "shape": [m, n, k],
                "config": [bm, bn, bk, warps, stages],
                "ms": ms,
                "tflops": tflops,
                "max_err": err,
                "passes_1e-4": ok,
                "speedup_vs_compiled": base["compiled"] / ms,
                "speedup_vs_eager": base["eager"] / ms,
                **{f"{key}_ms": v for key, v in base.items()},
            }
            rows.append(row)
            print(
                f"  {bm}x{bn}x{bk} w{warps} s{stages}: {ms:.4f} ms {tflops:.1f} TFLOP/s err {err:.2e} "
                f"pass {ok} x{row['speedup_vs_compiled']:.2f} vs compiled",
                flush=True,
            )
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
