"""The cuda, cute and triton targets on a real NVIDIA GPU, and our timing checked twice.

    python bench/gpu_nvidia.py --out DIR            # on a machine with an NVIDIA GPU
    python bench/gpu_nvidia.py --out DIR --no-ncu   # without Nsight Compute

For every example problem and every target (cuda: load_inline, cute: CuTe DSL, triton) it runs
Engine.compile (problem given, so Triton and CuTe trace real launches) and Engine.verify twice
(the first cuda verify pays the real load_inline build; the second hits kforge's build cache),
with eager and torch.compile baselines. A target that is not available (e.g. cute without
nvidia-cutlass-dsl installed) is recorded as skipped, with the reason, and the run goes on.

Then, for one kernel (the CUDA row softmax), the candidate time from verify is compared with
triton.testing.do_bench on the same ModelNew and inputs, and with Nsight Compute's
gpu__time_duration.sum for the kernel alone, once with ncu's default clock control (locks
clocks to base) and once with --clock-control none. All three flush L2 before each
measurement (ncu: --cache-control all, its default).

Writes gpu-nvidia.json and gpu-nvidia.md to DIR.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from device_label import device_label  # noqa: E402

from kforge_mcp.api import Engine  # noqa: E402

EXAMPLES = ["fused_bias_gelu", "row_softmax", "gemm_bias_relu"]
TARGETS = ["cuda", "cute", "triton"]
TIMING_PROBLEM, TIMING_TARGET, TIMING_KERNEL = "row_softmax", "cuda", "row_softmax_kernel"


def paths(name: str, candidate: str) -> tuple[str, str]:
    return str(ROOT / "examples" / "problems" / f"{name}.py"), str(
        ROOT / "examples" / "candidates" / name / f"{candidate}.py"
    )


def run_examples(engine: Engine) -> dict:
    statuses = {t.name: t for t in engine.list_targets().targets}
    out: dict = {}
    for target in TARGETS:
        status = statuses[target]
        if not status.available:
            out[target] = {"skipped": status.reason, "can_compile": status.can_compile}
            print(f"[{target}] skipped: {status.reason}", flush=True)
            continue
        out[target] = {}
        for name in EXAMPLES:
            prob, cand = paths(name, target)
            entry: dict = {}
            try:
                t0 = time.perf_counter()
                comp = engine.compile(target, cand, problem=prob, timeout_s=900)
                entry["compile"] = {
                    "wall_s": time.perf_counter() - t0,
                    **comp.model_dump(mode="json", exclude={"ptx", "sass"}),
                }
                entry["verify"] = []
                for _ in range(2):
                    t0 = time.perf_counter()
                    rep = engine.verify(prob, cand, target=target, timeout_s=900)
                    entry["verify"].append({"wall_s": time.perf_counter() - t0, **rep.model_dump(mode="json")})
            except Exception as e:  # noqa: BLE001  (one broken pair must not hide the others)
                entry["exception"] = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}"
            v = entry.get("verify") or [{}]
            print(
                f"[{target}] {name}: compile ok={entry.get('compile', {}).get('ok')} verdict={v[-1].get('verdict')} "
                f"speedup={v[-1].get('speedup')} errors={v[-1].get('errors')}",
                flush=True,
            )
            out[target][name] = entry
    return out


def load_pair(name: str, target: str, engine_home: Path):
    """ModelNew and inputs in this process, built the way a worker builds them."""
    from kforge_mcp.core.problem import build_models, load_problem, resolve_source
    from kforge_mcp.targets import get_target

    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(engine_home / "cache" / "torch_extensions"))
    prob_path, cand_path = paths(name, target)
    work = Path(tempfile.mkdtemp(prefix="kforge-timing-"))
    problem = load_problem(resolve_source(prob_path, "problem"), work)
    module = get_target(target).load(resolve_source(cand_path, "candidate"), "cuda:0", work)
    _, model = build_models(problem, module, "cuda:0", build_reference=False)
    return model, problem.make_inputs(7, "cuda:0")


def do_bench_check(engine_home: Path) -> dict:
    import triton.testing

    model, inputs = load_pair(TIMING_PROBLEM, TIMING_TARGET, engine_home)
    with torch.no_grad():
        ms = triton.testing.do_bench(lambda: model(*inputs), warmup=25, rep=100, return_mode="median")
    return {"do_bench_median_ms": ms}


NCU_SCRIPT = """
import sys, torch
sys.path.insert(0, {root!r})
sys.path.insert(0, {bench!r})
from gpu_nvidia import load_pair
from pathlib import Path
model, inputs = load_pair({name!r}, {target!r}, Path({home!r}))
with torch.no_grad():
    for _ in range({calls}):
        model(*inputs)
torch.cuda.synchronize()
"""


def find_ncu() -> str | None:
    return shutil.which("ncu") or next((str(p) for p in (Path("/usr/local/cuda/bin/ncu"),) if p.exists()), None)


def ncu_check(engine_home: Path, clock_control: str | None, launches: int = 5) -> dict:
    ncu = find_ncu()
    if ncu is None:
        return {"skipped": "ncu not found"}
    script = Path(tempfile.mkdtemp(prefix="kforge-ncu-")) / "one_kernel.py"
    script.write_text(
        NCU_SCRIPT.format(
            root=str(ROOT),
            bench=str(ROOT / "bench"),
            name=TIMING_PROBLEM,
            target=TIMING_TARGET,
            home=str(engine_home),
            calls=launches + 2,
        )
    )
    cmd = [
        ncu,
        "--csv",
        "--page",
        "raw",
        "--metrics",
        "gpu__time_duration.sum",
        "-k",
        f"regex:{TIMING_KERNEL}",
        "--launch-skip",
        "2",
        "-c",
        str(launches),
    ]
    if clock_control:
        cmd += ["--clock-control", clock_control]
    cmd += [sys.executable, str(script)]
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(engine_home / "cache" / "torch_extensions"))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    result = {"command": " ".join(cmd), "returncode": proc.returncode, "wall_s": time.perf_counter() - t0}
    values_ns = parse_ncu_csv(proc.stdout, "gpu__time_duration.sum")
    if not values_ns:
        result["error"] = (proc.stdout + proc.stderr)[-3000:]
        return result
    result["durations_ns"] = values_ns
    result["median_ms"] = statistics.median(values_ns) / 1e6
    return result


def parse_ncu_csv(text: str, metric: str) -> list[float]:
    """ncu --csv --page raw: a header row, a units row, then one row per kernel; numbers may
    carry thousands separators. Units of gpu__time_duration are converted to ns."""
    import csv

    rows = [r for r in csv.reader(line for line in text.splitlines() if line.startswith('"'))]
    if len(rows) < 3 or metric not in rows[0]:
        return []
    col = rows[0].index(metric)
    unit = rows[1][col].strip().lower()
    scale = {
        "ns": 1.0,
        "nsecond": 1.0,
        "usecond": 1e3,
        "us": 1e3,
        "msecond": 1e6,
        "ms": 1e6,
        "second": 1e9,
        "s": 1e9,
    }.get(unit, 1.0)
    values = []
    for r in rows[2:]:
        try:
            values.append(float(r[col].replace(",", "")) * scale)
        except (ValueError, IndexError):
            continue
    return values


def summarize(result: dict) -> str:
    lines = [
        "# cuda, cute and triton targets on an NVIDIA GPU",
        "",
        f"- device: {result['device']}; torch {result['torch']}; triton {result['triton']}; "
        f"nvidia-cutlass-dsl {result['cutlass_dsl'] or 'not installed'}; python {platform.python_version()}",
        f"- date: {result['date']}; command: `python bench/gpu_nvidia.py --out DIR`; total {result['total_s']:.0f} s",
        "",
        "| target | problem | compile ok | compile s | regs | spills | smem B | verdicts | candidate ms | eager ms | "
        "compiled ms | speedup (over) | verify wall s (first, second) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for target, per in result["examples"].items():
        if "skipped" in per:
            lines.append(f"| {target} | all | skipped: {per['skipped']} (can_compile={per['can_compile']}) |||||||||||")
            continue
        for name, e in per.items():
            if "exception" in e and "verify" not in e:
                lines.append(f"| {target} | {name} | exception: {e['exception'].splitlines()[0][:150]} |||||||||||")
                continue
            c = e.get("compile", {})
            k = (c.get("kernels") or [{}])[0]
            vs = e.get("verify", [])
            last = vs[-1] if vs else {}
            t = last.get("timing") or {}

            def ms(key, t=t):
                return f"{t[key]['median_ms']:.4f}" if t.get(key) else "-"

            sp = f"{last['speedup']:.2f} ({last['speedup_over']})" if last.get("speedup") else "-"
            errs = "; ".join(str(x)[:120] for x in last.get("errors", [])[:1])
            walls = ", ".join(f"{v['wall_s']:.1f}" for v in vs)
            lines.append(
                f"| {target} | {name} | {c.get('ok')} | {c.get('wall_s', 0):.1f} | {k.get('registers')} | {k.get('spills')} | "
                f"{k.get('shared_bytes')} | {', '.join(str(v.get('verdict')) for v in vs)}{' ' + errs if errs else ''} | "
                f"{ms('candidate')} | {ms('eager')} | {ms('compiled')} | {sp} | "
                f"{walls} |"
            )
    tc = result["timing_check"]
    lines += ["", f"## One kernel timed three ways: {TIMING_TARGET} {TIMING_PROBLEM} ({TIMING_KERNEL})", ""]
    ours = tc.get("kforge_verify_median_ms")
    lines.append(
        f"- kforge verify (ModelNew.forward incl. allocation and launch, L2 flushed, device events): "
        f"{ours if ours is None else f'{ours:.4f}'} ms"
    )
    db = tc.get("do_bench", {})
    lines.append(f"- triton.testing.do_bench (same forward, L2 flushed): {db.get('do_bench_median_ms', db)} ms")
    for key, label in (
        ("ncu_locked", "ncu default (clocks locked to base)"),
        ("ncu_unlocked", "ncu --clock-control none"),
    ):
        n = tc.get(key, {})
        lines.append(
            f"- {label}, kernel only: "
            + (
                f"{n['median_ms']:.4f} ms (median of {len(n['durations_ns'])})"
                if "median_ms" in n
                else f"no value: {str(n)[:300]}"
            )
        )
    if ours and "median_ms" in tc.get("ncu_unlocked", {}):
        lines.append(
            f"- ratio kforge / ncu unlocked: {ours / tc['ncu_unlocked']['median_ms']:.2f} "
            "(the difference is host launch and allocation overhead, which verify includes on purpose)"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "gpu-nvidia"))
    parser.add_argument("--no-ncu", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs an NVIDIA GPU")
    import triton

    started = time.perf_counter()
    home = Path(tempfile.mkdtemp(prefix="kforge-gpu-nvidia-"))
    engine = Engine(home=home)
    try:
        examples = run_examples(engine)
        targets = engine.list_targets().model_dump(mode="json")
    finally:
        engine.close()
    timing: dict = {}
    try:
        v = examples.get(TIMING_TARGET, {}).get(TIMING_PROBLEM, {}).get("verify", [])
        timing["kforge_verify_median_ms"] = (
            v[-1]["timing"]["candidate"]["median_ms"] if v and v[-1].get("timing") else None
        )
        timing["do_bench"] = do_bench_check(home)
    except Exception as e:  # noqa: BLE001
        timing["do_bench"] = {"error": f"{type(e).__name__}: {e}"}
    if not args.no_ncu:
        for key, cc in (("ncu_locked", None), ("ncu_unlocked", "none")):
            try:
                timing[key] = ncu_check(home, cc)
            except Exception as e:  # noqa: BLE001
                timing[key] = {"error": f"{type(e).__name__}: {e}"}
    result = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cutlass_dsl": _version("nvidia-cutlass-dsl"),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "targets": targets,
        "examples": examples,
        "timing_check": timing,
        "total_s": time.perf_counter() - started,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{device_label()}.json").write_text(json.dumps(result, separators=(",", ":"), default=str))
    (out / f"{device_label()}.md").write_text(summarize(result))
    print(summarize(result))


def _version(dist: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
