"""Capture real profiles of the cases in cases.py on a GPU: timing, a torch.profiler trace and an
Nsight Compute report (raw and details CSV pages) per case, for testing kforge's analysis agent.

    python bench/analysis/capture.py --out DIR [--budget-s S] [--pack DIR] [CASE ...]

Per case, each step in its own process (one CUPTI user per process):
  * ``--child time CASE``: correctness check against a torch reference, then CUDA-event timing
    (warm-up, median of N runs, a 256 MB L2 flush before each) and a chrome trace of 3 calls,
    each wrapped in ``record_function("kforge::forward")``;
  * ``ncu --profile-from-start off ... --child ncu CASE``: warms up, then cudaProfilerStart, one
    call, synchronize, cudaProfilerStop. The sections and metrics come from
    kforge_mcp/platforms/nvidia/ncu_metrics.py (loaded alone; it is dependency-free), pruned once per run
    of names the installed ncu does not report.
Then ``ncu --import`` exports the raw and details pages, and ``X.meta.json`` records the case's
meta, the timing, the versions and the ncu command line.

Imports only torch, triton and the standard library.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import glob
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NCU_METRICS = ROOT / "kforge_mcp" / "platforms" / "nvidia" / "ncu_metrics.py"
sys.path.insert(0, str(HERE))

# torch/triton-only cases first (they need no build), the CUDA-extension cases after the build
ORDER = [
    "cublas_bf16_gemm",
    "gemm_fp32_cublas",
    "triton_gemm_bf16",
    "triton_gemm_tf32",
    "triton_gemm_3xtf32",
    "triton_gemm_fp32",
    "softmax_naive",
    "layernorm_tuned",
    "small_launch_chain",
    "transpose_naive",
    "transpose_tiled",
    "transpose_bank_conflicts",
    "gather_uncoalesced",
    "atomics_contention",
    "register_spills",
]
NCU_COUNT = {"small_launch_chain": 8}  # kernels per forward where it is more than one
REP_KEEP_BYTES = 4 * 1024 * 1024
T0 = time.time()


def log(*parts) -> None:
    print(f"[{time.time() - T0:7.1f}s]", *parts, flush=True)


def sh(cmd: list[str], timeout: float, stdout_path: Path | None = None) -> tuple[int, str]:
    """Run cmd; return (rc, combined text). With stdout_path, stdout goes there and the text is stderr."""
    try:
        if stdout_path is not None:
            with open(stdout_path, "w") as f:
                p = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, text=True, timeout=timeout)
            return p.returncode, p.stderr
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out + f"\n[timeout after {timeout:.0f}s]"
    except OSError as e:
        return 127, f"[could not run {cmd[0]}: {e}]"


def load_ncu_metrics():
    spec = importlib.util.spec_from_file_location("kforge_ncu_metrics", NCU_METRICS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def find_ncu() -> str:
    path = shutil.which("ncu")
    if path:
        return path
    found = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu") + glob.glob("/usr/local/cuda*/bin/ncu"))
    if not found:
        raise SystemExit("ncu not found")
    return found[-1]


# ---------------------------------------------------------------------------------------------
# children
# ---------------------------------------------------------------------------------------------


def child_build() -> None:
    import cases

    t = time.time()
    cases.cuda_ext(verbose=True)
    print(f"cuda extension ready in {time.time() - t:.1f}s at {cases.EXT_DIR}", flush=True)


def child_time(name: str, out: Path, iters: int) -> None:
    import cases
    import torch
    import triton
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.manual_seed(0)
    fn, meta = cases.build(name)
    fn()
    torch.cuda.synchronize()
    try:
        check = fn.check() if hasattr(fn, "check") else None
    except Exception as e:  # noqa: BLE001  (a failed reference must not lose the timing)
        check = {"ok": None, "error": repr(e)[:500]}
    torch.cuda.empty_cache()
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    flush = torch.empty(64 * 1024 * 1024, dtype=torch.float32, device="cuda")  # 256 MB, > 50 MB of L2
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(iters):
        flush.fill_(float(i))
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del flush
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            with record_function("kforge::forward"):
                fn()
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(out / f"{name}.torch-trace.json"))
    kernels = {}
    for e in prof.key_averages():
        dev = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if dev and e.key != "kforge::forward":
            kernels[e.key] = {"count": e.count, "device_time_total_us": dev}
    rx = re.compile(meta["kernel_regex"])
    result = {
        "meta": meta,
        "measured_ms": statistics.median(times),
        "timing": {
            "iters": iters,
            "min_ms": min(times),
            "mean_ms": statistics.fmean(times),
            "max_ms": max(times),
            "all_ms": times,
            "l2_flush_bytes": 256 * 1024 * 1024,
            "method": "CUDA events around one call, median; 5 warm-up calls; 256 MB written before each",
        },
        "check": check,
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "trace_kernels": kernels,
        "kernel_regex_matches": sorted(k for k in kernels if rx.search(k)),
    }
    (out / f"{name}.timing.json").write_text(json.dumps(result, indent=1))
    print(
        f"{name}: median {result['measured_ms']:.4f} ms, check {check}, regex matches {result['kernel_regex_matches']}",
        flush=True,
    )


def child_ncu(name: str) -> None:
    import cases
    import torch

    torch.manual_seed(0)
    fn, _ = cases.build(name)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


# ---------------------------------------------------------------------------------------------
# driver
# ---------------------------------------------------------------------------------------------


def raw_header(csv_path: Path) -> list[str]:
    try:
        with open(csv_path, newline="") as f:
            for row in csv.reader(f):
                if row and row[0] == "ID":
                    return row
    except OSError:
        pass
    return []


def ncu_profile(
    ncu: str, name: str, stem: Path, metrics_mod, metrics: list[str], timeout: float, regex: str | None, count: int
) -> tuple[list[str], int, str]:
    cmd = [ncu, "--profile-from-start", "off", "-o", str(stem), "--force-overwrite", *metrics_mod.ncu_args(metrics)]
    if regex:
        cmd += ["-k", f"regex:{regex}"]
    cmd += ["-c", str(count), sys.executable, str(Path(__file__).resolve()), "--child", "ncu", name]
    rc, text = sh(cmd, timeout)
    return cmd, rc, text


def export_pages(ncu: str, rep: Path, stem: Path) -> dict:
    codes = {}
    for page in ("raw", "details"):
        rc, err = sh([ncu, "--import", str(rep), "--csv", "--page", page], 120, stem.with_suffix(f".ncu-{page}.csv"))
        codes[page] = rc
        if err.strip():
            log(f"  export {page} stderr: {err.strip()[:500]}")
    return codes


def query_metric_bases(ncu: str, out: Path) -> set[str]:
    rc, text = sh([ncu, "--query-metrics", "--csv"], 120)
    (out / "ncu-query-metrics.csv").write_text(text)
    bases = set()
    for row in csv.reader(io.StringIO(text)):
        if row and re.fullmatch(r"[a-z0-9_]+__[a-z0-9_]+", row[0].strip()):
            bases.add(row[0].strip())
    log(f"ncu --query-metrics --csv: rc {rc}, {len(bases)} base names")
    return bases


def prune_metrics(ncu: str, metrics_mod, out: Path) -> tuple[list[str], dict]:
    """Drop requested metrics the installed ncu does not report: --query-metrics first, then a probe
    profile of a tiny kernel with every name, whose raw page says which ones ncu really collects."""
    wanted = list(dict.fromkeys(metrics_mod.DEFAULT_METRICS))
    bases = query_metric_bases(ncu, out)
    query_unknown = [m for m in wanted if bases and m.split(".")[0] not in bases]
    log(f"requested {len(wanted)} metrics; not in --query-metrics: {query_unknown}")
    info = {"requested": wanted, "query_unknown": query_unknown, "probe": []}
    trial = list(wanted)
    for attempt in range(3):
        stem = out / "_probe"
        for f in out.glob("_probe*"):
            f.unlink()
        cmd, rc, text = ncu_profile(ncu, "small_launch_chain", stem, metrics_mod, trial, 240, "elementwise", 1)
        rep = stem.with_suffix(".ncu-rep")
        errors = [ln for ln in text.splitlines() if "==ERROR==" in ln or "==WARNING==" in ln]
        info["probe"].append({"attempt": attempt, "rc": rc, "n_metrics": len(trial), "errors": errors[:40]})
        log(f"probe {attempt}: rc {rc}, report {rep.exists()}, {len(errors)} error/warning lines")
        for ln in errors[:40]:
            log("   ", ln[:300])
        if rc == 0 and rep.exists():
            export_pages(ncu, rep, stem)
            header = set(raw_header(stem.with_suffix(".ncu-raw.csv")))
            missing = [m for m in trial if m not in header]
            dropped = [m for m in wanted if m not in trial] + missing
            kept = [m for m in trial if m in header]
            info.update(
                dropped=dropped,
                kept=kept,
                probe_report=str(rep),
                query_unknown_but_reported=[m for m in query_unknown if m in header],
            )
            return kept, info
        named = [m for m in trial if any(m in ln or m.split(".")[0] in ln for ln in errors)]
        drop = set(named) or set(query_unknown) & set(trial)
        if not drop:
            break
        trial = [m for m in trial if m not in drop]
    log("probe did not produce a report; falling back to the --query-metrics pruning alone")
    kept = [m for m in wanted if m not in query_unknown]
    info.update(dropped=query_unknown, kept=kept, probe_report=None)
    return kept, info


def find_ncu_report(ncu: str, probe_rep: str | None) -> dict:
    real = os.path.realpath(ncu)
    cands = [
        os.path.join(os.path.dirname(real), "extras", "python"),
        os.path.join(os.path.dirname(real), "..", "extras", "python"),
    ]
    try:  # /usr/local/cuda/bin/ncu is often a shell script that execs the real one
        text = Path(ncu).read_text(errors="replace")[:4000]
        for m in re.finditer(r"(/[\w./-]*nsight-compute[\w.-]*)", text):
            cands.append(os.path.join(m.group(1), "extras", "python"))
    except OSError:
        pass
    cands += glob.glob("/opt/nvidia/nsight-compute/*/extras/python") + glob.glob(
        "/usr/local/cuda*/nsight-compute*/extras/python"
    )
    seen, result = set(), {"ncu": ncu, "ncu_realpath": real, "tried": []}
    for c in cands:
        c = os.path.normpath(c)
        if c in seen or not os.path.isdir(c):
            continue
        seen.add(c)
        code = f"import sys; sys.path.insert(0, {c!r}); import ncu_report; print('FILE', ncu_report.__file__)"
        if probe_rep:
            code += (
                f"\nctx = ncu_report.load_report({probe_rep!r}); r = ctx.range_by_idx(0); a = r.action_by_idx(0)"
                "\nprint('LOADED', ctx.num_ranges(), r.num_actions(), a.name(), a.metric_by_name('gpu__time_duration.sum').as_double())"
            )
        rc, text = sh([sys.executable, "-c", code], 60)
        result["tried"].append({"path": c, "rc": rc, "output": text.strip()[-800:]})
        if rc == 0 and "FILE" in text:
            result["path"] = c
            result["module_file"] = text.split("FILE", 1)[1].split()[0]
            break
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", choices=["build", "time", "ncu"])
    ap.add_argument("--out", default=str(HERE / "captures"))
    ap.add_argument("--budget-s", type=float, default=540.0, help="start no case after this (seconds from start)")
    ap.add_argument("--case-s", type=float, default=45.0, help="expected seconds per case, for the budget check")
    ap.add_argument("--iters", type=int, default=25)
    ap.add_argument("--pack", help="write captures.tar.gz (and reps tarballs) here")
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    out = Path(args.out)
    if args.child == "build":
        return child_build()
    if args.child == "time":
        return child_time(args.cases[0], out, args.iters)
    if args.child == "ncu":
        return child_ncu(args.cases[0])

    import cases  # labels and the case list only; no CUDA in the driver

    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    todo = [c for c in ORDER if not args.cases or c in args.cases]
    unknown = [c for c in args.cases if c not in cases.CASES]
    if unknown:
        raise SystemExit(f"unknown cases {unknown}")

    build_proc = None
    if any(c in cases.CUDA_EXT_CASES for c in todo):
        build_log = open(out / "cuda-ext-build.log", "w")
        build_proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", "build"],
            stdout=build_log,
            stderr=subprocess.STDOUT,
        )
        log("cuda extension build started in the background")

    ncu = find_ncu()
    rc, ver = sh([ncu, "--version"], 60)
    ncu_version = ver.strip().splitlines()[-1] if ver.strip() else "?"
    log(f"ncu {ncu}: {ncu_version}")
    import torch
    import triton

    env = {
        "ncu": ncu,
        "ncu_version": ncu_version,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": sys.version.split()[0],
        "ncu_metrics_file": str(NCU_METRICS.relative_to(ROOT)),
    }
    rc, smi = sh(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem", "--format=csv"], 30)
    env["nvidia_smi"] = smi.strip()
    log("nvidia-smi:", smi.strip().replace("\n", " | "))

    metrics_mod = load_ncu_metrics()
    metrics, prune_info = prune_metrics(ncu, metrics_mod, out)
    env["metrics_dropped"] = prune_info.get("dropped", [])
    env["metrics_used"] = metrics
    env["sections"] = list(metrics_mod.SECTIONS)
    log(f"metrics kept {len(metrics)}, dropped {len(env['metrics_dropped'])}: {env['metrics_dropped']}")
    (out / "ncu-metrics-pruning.json").write_text(json.dumps(prune_info, indent=1))
    env["ncu_report"] = find_ncu_report(ncu, prune_info.get("probe_report"))
    log("ncu_report:", json.dumps(env["ncu_report"])[:1500])

    summary = {"env": env, "cases": {}, "skipped": []}
    pool = concurrent.futures.ThreadPoolExecutor(2)
    pending = []
    for name in todo:
        elapsed = time.time() - T0
        if elapsed + args.case_s > args.budget_s:
            log(f"SKIP {name}: {elapsed:.0f}s elapsed, budget {args.budget_s:.0f}s")
            summary["skipped"].append(name)
            continue
        if name in cases.CUDA_EXT_CASES and build_proc is not None:
            rc = build_proc.wait()
            build_log.close()
            log(f"cuda extension build rc {rc}; ptxas lines:")
            for ln in (out / "cuda-ext-build.log").read_text(errors="replace").splitlines():
                if "ptxas" in ln or "spill" in ln or "error" in ln.lower():
                    log("   ", ln[:250])
            build_proc = None
        log(f"=== {name}")
        rec = {"name": name}
        rc, text = sh(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--child",
                "time",
                "--out",
                str(out),
                "--iters",
                str(args.iters),
                name,
            ],
            240,
        )
        rec["time_rc"] = rc
        log(f"  time rc {rc}: {text.strip()[-1500:]}")
        timing_path = out / f"{name}.timing.json"
        timing = json.loads(timing_path.read_text()) if timing_path.exists() else {}
        meta = timing.get("meta") or {}
        stem = out / name
        rep = stem.with_suffix(".ncu-rep")
        if rep.exists():
            rep.unlink()
        regex = meta.get("kernel_regex") or cases.KERNEL_REGEX[name]
        count = NCU_COUNT.get(name, 1)
        cmd, rc, text = ncu_profile(ncu, name, stem, metrics_mod, metrics, 300, regex, count)
        rec["ncu_rc"] = rc
        log(f"  ncu rc {rc}, report {rep.exists()}")
        for ln in text.splitlines():
            if ln.startswith("==ERROR==") or ln.startswith("==WARNING==") or "==PROF== Profiling" in ln:
                log("   ", ln[:300])
        if not rep.exists():
            log("  no report with the kernel regex; profiling every kernel in the range instead")
            cmd, rc, text = ncu_profile(ncu, name, stem, metrics_mod, metrics, 300, None, count)
            rec["ncu_rc_fallback"] = rc
            for ln in text.splitlines()[-20:]:
                log("   ", ln[:300])
        full = {
            **meta,
            "measured_ms": timing.get("measured_ms"),
            "timing": timing.get("timing"),
            "check": timing.get("check"),
            "device": timing.get("device"),
            "ncu_version": ncu_version,
            "torch": timing.get("torch", env["torch"]),
            "triton": timing.get("triton", env["triton"]),
            "ncu_command": shlex.join(cmd),
            "ncu_kernel_count": count,
            "trace_kernels": timing.get("trace_kernels"),
            "kernel_regex_matches": timing.get("kernel_regex_matches"),
            "capture": rec,
        }
        (out / f"{name}.meta.json").write_text(json.dumps(full, indent=1))
        summary["cases"][name] = rec
        if rep.exists():  # the CSV exports need no GPU: run them beside the next case
            rec["rep_bytes"] = rep.stat().st_size
            pending.append((name, stem, full, pool.submit(export_pages, ncu, rep, stem)))
        log(f"  done: {json.dumps(rec)}")

    for name, stem, full, fut in pending:
        rec = full["capture"]
        rec["export"] = fut.result()
        rec["raw_header_ok"] = bool(raw_header(stem.with_suffix(".ncu-raw.csv")))
        (out / f"{name}.meta.json").write_text(json.dumps(full, indent=1))
        log(f"{name}: exports {rec['export']}, raw header ok {rec['raw_header_ok']}")
    pool.shutdown()
    (out / "capture-summary.json").write_text(json.dumps(summary, indent=1))
    if args.pack:
        pack(out, Path(args.pack))
    log("finished")


def pack(out: Path, dest: Path) -> None:
    """captures.tar.gz: everything but the .ncu-rep files; reps-N.tar.gz: reps under 4 MB, in chunks < 15 MB."""
    dest.mkdir(parents=True, exist_ok=True)
    skip_prefix = "_probe"
    with tarfile.open(dest / "captures.tar.gz", "w:gz") as tar:
        for f in sorted(out.iterdir()):
            if f.is_file() and f.suffix != ".ncu-rep" and not f.name.startswith(skip_prefix):
                tar.add(f, arcname=f.name)
    reps = sorted(
        (f for f in out.glob("*.ncu-rep") if not f.name.startswith(skip_prefix)), key=lambda f: f.stat().st_size
    )
    chunk, size, n = [], 0, 0
    for f in reps + [None]:
        if f is not None and f.stat().st_size > REP_KEEP_BYTES:
            log(f"  not packing {f.name}: {f.stat().st_size} bytes")
            continue
        if f is None or size + f.stat().st_size > 15 * 1024 * 1024:
            if chunk and n < 5:
                with tarfile.open(dest / f"reps-{n}.tar.gz", "w:gz") as tar:
                    for c in chunk:
                        tar.add(c, arcname=c.name)
                n += 1
            chunk, size = [], 0
        if f is not None:
            chunk.append(f)
            size += f.stat().st_size
    for f in sorted(dest.iterdir()):
        log(f"  packed {f.name}: {f.stat().st_size} bytes")


if __name__ == "__main__":
    main()
