"""The analysis agent end to end on a GPU, through the library (the same engine the MCP tools use):

1. verify a 3xTF32 Triton GEMM on the Level 2 Gemm_Add_ReLU shape (1024 x 8192 x 8192, fp32 at 1e-4):
   its fraction_of_sol must be <= 1 and the bound must assume the fastest path measured to pass (bf16x3 here);
2. profile the reference (cuBLAS fp32) and the 3xTF32 candidate with depth="metrics" (ncu with the
   sections and metrics the rules read) and analyze each: the first recommendation for cuBLAS fp32
   should be use_tensor_cores, for the 3xTF32 kernel feed_tensor_pipe (never occupancy);
3. read the corpus's .ncu-rep files through kforge's loader (ncu_report found beside ncu).

    PYTHONPATH=$PWD python bench/analysis/h100_checks.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from packed_captures import unpacked  # noqa: E402

from kforge_mcp.api import Engine  # noqa: E402
from kforge_mcp.profiling.loader import load_profile  # noqa: E402

PROBLEM = ROOT / "bench" / "problems" / "gemm_add_relu_l2.py"
CANDIDATE = ROOT / "bench" / "candidates" / "gemm_add_relu_l2" / "triton_3xtf32.py"


def rec_line(a) -> list[str]:
    return [f"{r.rule} (~{r.expected_gain:.0%}): {r.title}" for r in a.recommendations[:3]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/h100-checks")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    engine = Engine(home=Path(tempfile.mkdtemp(prefix="kforge-h100-")), allow_dirs=[ROOT])
    result: dict = {}
    try:
        t0 = time.perf_counter()
        v = engine.verify(str(PROBLEM), str(CANDIDATE), target="triton", timeout_s=900)
        result["verify"] = {
            "verdict": v.verdict,
            "speedup": v.speedup,
            "speedup_over": v.speedup_over,
            "fraction_of_sol": v.fraction_of_sol,
            "sol_ms": v.sol_ms,
            "sol_path": v.sol_path,
            "timing": v.model_dump(mode="json").get("timing"),
            "findings": [(f.code, f.severity, f.message[:200]) for f in v.findings],
            "seconds": round(time.perf_counter() - t0, 1),
        }
        print("verify:", json.dumps(result["verify"], indent=1)[:3000], flush=True)
        for label, cand in (("reference (cuBLAS fp32)", None), ("triton 3xTF32", str(CANDIDATE))):
            t0 = time.perf_counter()
            prof = engine.profile(str(PROBLEM), cand, target="triton", depth="metrics", iterations=3, timeout_s=900)
            a = engine.analyze_profile(profile=prof.model_dump(mode="json"), problem=str(PROBLEM))
            ks = [
                {
                    "name": k.name[:90],
                    "category": k.category,
                    "path": k.compute_path,
                    "pipes": k.pipes,
                    "registers": k.registers,
                    "occupancy": k.achieved_occupancy_pct,
                    "device_ms": k.device_ms,
                }
                for k in prof.device_kernels()
            ]
            result[label] = {
                "source": prof.source,
                "notes": prof.notes[-4:],
                "errors": prof.errors,
                "kernels": ks,
                "roofline": a.roofline.model_dump(mode="json") if a.roofline else None,
                "recommendations": rec_line(a),
                "summary": a.summary,
                "stop": a.stop,
                "seconds": round(time.perf_counter() - t0, 1),
            }
            print(label, json.dumps(result[label], indent=1)[:4000], flush=True)
    finally:
        engine.close()
    result["ncu_rep"] = {}
    with unpacked(ROOT / "bench" / "analysis" / "captures") as captures:
        for rep in sorted(captures.glob("*.ncu-rep")):
            try:
                r = load_profile(rep)
                result["ncu_rep"][rep.name] = {
                    "kernels": [k.name[:80] for k in r.kernels],
                    "device": r.device_name,
                    "pipes": r.kernels[0].pipes if r.kernels else None,
                }
            except Exception as e:  # noqa: BLE001  (recorded: this is what the check is for)
                result["ncu_rep"][rep.name] = {"error": f"{type(e).__name__}: {e}"}
    print("ncu-rep:", json.dumps(result["ncu_rep"], indent=1)[:2000])
    (out / "h100-checks.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
