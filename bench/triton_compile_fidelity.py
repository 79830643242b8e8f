"""Does Triton ``compile`` report what a launch builds? On a GPU, every Triton example candidate
runs one forward through its real problem; the kernels Triton compiled for those launches (its
JIT cache, autotune configs included) are set beside kforge's compile report for the same
candidate and problem: registers, spill bytes, shared memory, signature and divisibility.

    python bench/triton_compile_fidelity.py OUT.json        # on a machine with an NVIDIA GPU

Prints a table and writes OUT.json. Imports only torch, triton and kforge_mcp; about a minute on an
H100. Candidates that abort the process on purpose (``*crash*``) are skipped.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kforge_mcp.core.problem import Source, build_models, load_problem  # noqa: E402
from kforge_mcp.core.source import import_source  # noqa: E402
from kforge_mcp.targets.triton.compile import compile_candidate  # noqa: E402
from kforge_mcp.targets.triton.launches import jit_functions  # noqa: E402

# Test candidates that exercise autotune configs and device-side descriptors, with their problem.
EXTRAS = [
    ("tests/candidates/autotuned.py", "fused_bias_gelu"),
    ("tests/candidates/device_descriptor.py", "fused_bias_gelu"),
]


def source(path: Path) -> Source:
    return Source(text=path.read_text(), name=str(path))


def pairs(root: Path = ROOT) -> list[tuple[Path, Path]]:
    """(candidate, problem) for every Triton example candidate and the extras."""
    found = []
    for prob in sorted((root / "examples" / "problems").glob("*.py")):
        for cand in sorted((root / "examples" / "candidates" / prob.stem).glob("triton*.py")):
            if "crash" not in cand.stem:  # it calls os.abort() on purpose
                found.append((cand, prob))
    return found + [(root / c, root / "examples" / "problems" / f"{p}.py") for c, p in EXTRAS]


def arg_name(names: list[str], path) -> str:
    return names[path[0]] + "".join(f"[{i}]" for i in path[1:]) if isinstance(path, tuple) else str(path)


def kernel_record(compiled, arg_names: list[str], registers: int | None, spill_bytes: int | None) -> dict:
    """What one CompiledKernel was built for and what it uses, in the report's terms."""
    src = compiled.src
    md = compiled.metadata
    constexprs = {arg_name(arg_names, k): repr(v) for k, v in src.constants.items()}
    divisible = [arg_name(arg_names, k) for k, v in src.attrs.items() if ["tt.divisibility", 16] in v]
    return {
        "name": compiled.name,
        "signature": dict(src.signature),
        "constexprs": constexprs,
        "divisible_by_16": sorted(divisible),
        "num_warps": md.num_warps,
        "num_stages": md.num_stages,
        "registers": registers,
        "spills": spill_bytes,
        "shared_bytes": md.shared,
    }


def key(k: dict) -> tuple:
    return (k["name"], tuple(sorted(k["constexprs"].items())), k["num_warps"], k["num_stages"])


def compare(candidate: str, ours: list[dict], launched: list[dict]) -> list[dict]:
    """One row per kernel build, matched on name, constexprs, warps and stages."""
    by_key = {key(k): k for k in launched}
    rows = []
    for k in ours:
        got = by_key.pop(key(k), None)
        row = {"candidate": candidate, "kernel": k["name"], "config": k.get("config"), "ours": k, "launched": got}
        if got is not None:
            row["equal"] = {f: k[f] == got[f] for f in ("registers", "spills", "shared_bytes")}
            row["same_signature"] = {n: t for n, t in k["signature"].items() if t != "constexpr"} == {
                n: t for n, t in got["signature"].items() if t != "constexpr"
            }
            row["same_divisibility"] = sorted(k["divisible_by_16"]) == got["divisible_by_16"]
        rows.append(row)
    rows += [
        {"candidate": candidate, "kernel": k["name"], "config": None, "ours": None, "launched": k}
        for k in by_key.values()
    ]
    return rows


def reported(cand: Path, prob: Path, arch: str, workdir: Path) -> tuple[dict, list[dict]]:
    report = compile_candidate(source(cand), arch, source(prob), workdir)
    return report.model_dump(exclude={"ptx", "sass"}), [k.model_dump() for k in report.kernels]


def launched(cand: Path, prob: Path, workdir: Path) -> list[dict]:
    """Run one forward on the GPU, then read every kernel Triton compiled for it."""
    import torch

    loaded = load_problem(source(prob), workdir)
    module = import_source(source(cand), workdir, "launched")
    with torch.no_grad():
        _, model = build_models(loaded, module, "cuda", build_reference=False)
        model(*loaded.make_inputs(seed=0, device="cuda"))
    torch.cuda.synchronize()
    records = []
    for fn in jit_functions(module).values():
        for cache in fn.device_caches.values():
            for compiled in list((cache[0] if isinstance(cache, tuple) else cache).values()):
                compiled._init_handles()  # loads the module once; sets n_regs and n_spills
                spills = compiled.n_spills * 4 if compiled.n_spills is not None else None  # Triton keeps words
                records.append(kernel_record(compiled, fn.arg_names, compiled.n_regs, spills))
    return records


def cell(row: dict, field: str) -> str:
    ours, got = row["ours"], row["launched"]
    a = "-" if ours is None else ours[field]
    b = "-" if got is None else got[field]
    return f"{a}/{b}" + ("" if a == b else " !")


def table(rows: list[dict]) -> str:
    lines = [
        "| candidate | kernel [config] | registers ours/launched | spill bytes | shared bytes | signature | divisibility |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        name = r["kernel"] + (f" [{r['config']}]" if r["config"] else "")
        sig = {True: "same", False: "differs", None: "-"}[r.get("same_signature")]
        div = {True: "same", False: "differs", None: "-"}[r.get("same_divisibility")]
        cells = [cell(r, f) for f in ("registers", "spills", "shared_bytes")]
        lines.append(f"| {r['candidate']} | {name} | {' | '.join(cells)} | {sig} | {div} |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> dict:
    matched = [r for r in rows if r["ours"] is not None and r["launched"] is not None]
    return {
        "builds_reported": sum(r["ours"] is not None for r in rows),
        "builds_launched": sum(r["launched"] is not None for r in rows),
        "matched": len(matched),
        "registers_equal": sum(r["equal"]["registers"] for r in matched),
        "spills_equal": sum(r["equal"]["spills"] for r in matched),
        "shared_equal": sum(r["equal"]["shared_bytes"] for r in matched),
        "signature_equal": sum(r["same_signature"] for r in matched),
        "divisibility_equal": sum(r["same_divisibility"] for r in matched),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where to write the JSON results")
    args = parser.parse_args(argv)
    import torch
    import triton

    if not torch.cuda.is_available():
        print("triton_compile_fidelity needs an NVIDIA GPU: it compares compile reports with real launches")
        return 2
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}" + ("a" if major >= 9 else "")
    started, rows, errors = time.perf_counter(), [], {}
    for cand, prob in pairs():
        name = str(cand.relative_to(ROOT))
        with tempfile.TemporaryDirectory() as tmp:
            try:
                report, ours = reported(cand, prob, arch, Path(tmp))
                if not report["ok"]:
                    errors[name] = "compile report not ok: " + "; ".join(d["message"] for d in report["diagnostics"])
                rows += compare(name, ours, launched(cand, prob, Path(tmp)))
            except Exception as e:  # noqa: BLE001  (one candidate's failure is a result, not the end of the run)
                errors[name] = f"{type(e).__name__}: {e}"
    result = {
        "device": torch.cuda.get_device_name(),
        "arch": arch,
        "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()},
        "seconds": round(time.perf_counter() - started, 1),
        "summary": summary(rows),
        "errors": errors,
        "rows": rows,
    }
    print(table(rows))
    print(json.dumps(result["summary"]), f"in {result['seconds']} s")
    for name, message in errors.items():
        print(f"error: {name}: {message}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, separators=(",", ":"), default=repr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
