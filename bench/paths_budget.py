"""The compute paths' measurement within a memory and time budget, on KernelBench Level 2 problems.

Budget (the default): for each problem, what `analyze_profile(problem=...)` runs to measure the paths (the Engine's
roofline, a fresh home so nothing is cached): wall time, the worker's peak resident memory (sampled from /proc every
0.1 s), the path the bound takes on the H200 and each path's error. `--label before --code DIR` runs another
checkout's kforge_mcp (e.g. main's) the same way; the record keeps both.

Validation (`--validate`): whether the reduced instance predicts the full problem's errors. For each problem, in
this process: each path's max error on the full problem (the batch cut into chunks, each sample's work unchanged:
only problems whose samples do not mix, no BatchNorm in training mode) against what the measurement says (on the
reduced instance, scaled for the full problem's element count), on the same input sets.

    .venv/bin/python bench/paths_budget.py --label before --code /tmp/main-checkout   # main's code
    .venv/bin/python bench/paths_budget.py                                            # this checkout
    .venv/bin/python bench/paths_budget.py --validate

Problems come from a KernelBench checkout (`--kernelbench`, read with git; none is copied here) or
bench/problems/*.py. Each mode updates its part of bench/results/paths-budget/cpu.json and renders cpu.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "paths-budget"
KERNELBENCH = Path("/work/.mirror/ScalingIntelligence+KernelBench/repo")
CONV = [23, 46, 13, 16, 61, 38, 15, 49, 67, 8]  # 67: Conv2d+GELU+GlobalAvgPool; 8: Conv3d+Divide+Max+GAP+Sum
GEMM = [12, 14, 22, 29, 33, 40, 53, 76, 86, 99]
# full size affordable on 2 cores in chunks of the batch, samples independent (no BatchNorm in training mode); the
# problems main measured at full size (23, 33, 76, 86, 99) are checked against its record instead
VALIDATE = ["67", "8", "13", "49", "gemm_multiply_leakyrelu_l2", "gemm_scaling_hardtanh_gelu_l2"]
VALIDATE_PATHS = ("fp8", "bf16", "fp16", "bf16x2", "fp16x2", "bf16x3", "3xtf32")
CHUNK_BYTES = 2**30  # intermediates of one chunk of the full batch in --validate


def problem_file(name: str, kernelbench: Path, tmp: Path) -> Path:
    """A KernelBench Level 2 problem by number (read from the checkout with git), or bench/problems/<name>.py."""
    local = ROOT / "bench" / "problems" / f"{name}.py"
    if local.is_file():
        return local
    listing = subprocess.run(
        ["git", "-C", str(kernelbench), "ls-tree", "--name-only", "HEAD", "KernelBench/level2/"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    path = next(p for p in listing if Path(p).name.startswith(f"{name}_"))
    out = tmp / Path(path).name
    out.write_text(
        subprocess.run(
            ["git", "-C", str(kernelbench), "show", f"HEAD:{path}"], capture_output=True, text=True, check=True
        ).stdout
    )
    return out


class PeakRSS:
    """The largest VmHWM of this process's children (the workers), sampled until stopped."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _children(self) -> list[int]:
        pids = []
        for task in os.listdir("/proc/self/task"):
            try:
                pids += [int(p) for p in Path(f"/proc/self/task/{task}/children").read_text().split()]
            except OSError:
                pass
        return pids

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            for pid in self._children():
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                line = next((x for x in status.splitlines() if x.startswith("VmHWM:")), None)
                if line:
                    self.peak = max(self.peak, int(line.split()[1]) * 1024)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def budget(names: list[str], args) -> list[dict]:
    from kforge_mcp.api import Engine

    rows = []
    with tempfile.TemporaryDirectory(prefix="kforge-kb-") as tmp:
        for name in names:
            path = problem_file(name, args.kernelbench, Path(tmp))
            engine = Engine(home=Path(tmp) / f"home-{name}", allow_dirs=[Path(tmp), ROOT])
            row: dict = {"problem": path.stem}
            started = time.perf_counter()
            try:
                with PeakRSS() as rss:
                    try:
                        roof = engine.roofline(str(path), device_name=args.device_name, timeout_s=args.timeout)
                        m = engine.measured_paths(engine.resolve_source(str(path), "problem"))
                        row.update(
                            path=roof.path,
                            bound=roof.bound,
                            sol_ms=roof.sol_ms,
                            path_reason=roof.path_reason,
                            errors=m.errors,
                            unmeasured=getattr(m, "unmeasured", {}),
                            reduction=m.reduction.summary() if getattr(m, "reduction", None) else None,
                            worker_s=m.seconds,
                        )
                    except Exception as e:  # noqa: BLE001  (a failure is the result to record)
                        row["failure"] = f"{type(e).__name__}: {e}"[:500]
                    row["wall_s"] = round(time.perf_counter() - started, 1)
            finally:
                engine.close()
            row["peak_gib"] = round(rss.peak / 2**30, 2)
            row["load_1min"] = round(os.getloadavg()[0], 1)  # the box is shared: the load the row ran under
            print(json.dumps(row)[:600], flush=True)
            rows.append(row)
    return rows


def full_size_errors(problem, paths: tuple[str, ...], seeds, atol: float, rtol: float, chunk: int) -> dict:
    """Each path's max error over the full problem's outputs on ``seeds``, the batch in chunks of ``chunk``."""
    import torch

    from kforge_mcp.core.problem import reference_model, seed_everything
    from kforge_mcp.judge.precision_paths import PATH_SPECS, _mode_class, error_fraction

    model = reference_model(problem, "cpu", 0)
    worst: dict[str, float | None] = {p: 0.0 for p in paths}
    mode_cls = _mode_class()
    with torch.no_grad():
        for seed in seeds:
            inputs = problem.make_inputs(seed, "cpu")
            for start in range(0, inputs[0].shape[0], chunk):
                part = [x[start : start + chunk] if isinstance(x, torch.Tensor) else x for x in inputs]
                expected = model(*part)
                for p in paths:
                    if worst[p] is None:
                        continue
                    seed_everything(seed)
                    with mode_cls(PATH_SPECS[p]):
                        got = model(*part)
                    err = error_fraction(expected, got, atol, rtol)
                    worst[p] = None if err is None else max(err, worst[p] or 0.0)
    return worst


def validate(names: list[str], args) -> list[dict]:
    from kforge_mcp.core.problem import load_problem
    from kforge_mcp.core.reduced import meta_instance
    from kforge_mcp.core.requests import RooflineRequest
    from kforge_mcp.core.source import Source
    from kforge_mcp.judge.precision_paths import SEEDS, measure_reference, plan
    from kforge_mcp.judge.roofline import count_problem

    rows = []
    with tempfile.TemporaryDirectory(prefix="kforge-kb-") as tmp:
        for name in names:
            path = problem_file(name, args.kernelbench, Path(tmp))
            src = Source(text=path.read_text(), name=str(path))
            problem = load_problem(src, Path(tmp))
            t0 = time.perf_counter()
            m = measure_reference(problem, RooflineRequest(problem=src), count_problem(problem, "cpu"))
            reduced_s = time.perf_counter() - t0
            batch = m.reduction.inputs[0][0]
            chunk = args.chunk or max(1, int(CHUNK_BYTES * batch / plan(*meta_instance(problem)).intermediates))
            t0 = time.perf_counter()
            full = full_size_errors(problem, VALIDATE_PATHS, SEEDS, m.atol, m.rtol, min(chunk, batch))
            row = {
                "problem": path.stem,
                "reduction": m.reduction.summary() if m.reduction else None,
                "reduced_s": round(reduced_s, 1),
                "full_s": round(time.perf_counter() - t0, 1),
                "chunk": chunk,
                "paths": {
                    p: {
                        "full": full[p],
                        "predicted": m.errors.get(p),
                        "scaled_by": m.scaled_by.get(p),
                    }
                    for p in VALIDATE_PATHS
                },
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def fmt(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def load(record: dict, label: str) -> str:
    loads = [r["load_1min"] for r in record.get(label, []) if "load_1min" in r]
    return f"{min(loads):g}-{max(loads):g}" if loads else record.get(f"{label}_load", "?")


def _summary(rows: list[dict]) -> str:
    """The rows at a glance: how many answered, the slowest and the largest, and any failure."""
    if len(rows) < 30:
        return ""
    answered = [r for r in rows if "failure" not in r]
    failed = [r["problem"] for r in rows if "failure" in r]
    walls = sorted(r["wall_s"] for r in answered)
    peaks = sorted(r["peak_gib"] for r in answered)
    text = (
        f"{len(answered)} of {len(rows)} answered: wall {walls[0]:g}-{walls[-1]:g} s (median "
        f"{walls[len(walls) // 2]:g}), peak {peaks[0]:g}-{peaks[-1]:g} GiB"
        if answered
        else f"0 of {len(rows)} answered"
    )
    for reason, marker in (
        ("a path left unmeasured by the time budget", "budget"),
        ("every path left to its rounding, its parameters too large to split within the memory cap", "parameters"),
        ("every path left to its rounding, the outputs within atol of zero", "within atol"),
    ):
        left = [r["problem"] for r in answered if any(marker in why for why in (r.get("unmeasured") or {}).values())]
        if left:
            text += f"; {reason}: {', '.join(left)}"
    return text + (f"; failed: {', '.join(failed)}." if failed else ".")


def render(record: dict) -> str:
    lines = [
        "# Compute paths within a memory and time budget (CPU)",
        "",
        f"`{record.get('command', 'python bench/paths_budget.py')}` on {record.get('machine', 'a 2-core CPU box')}. "
        "Each row is what `analyze_profile(problem=...)` runs to measure the compute paths (the Engine's roofline "
        "with a fresh home, nothing cached): wall time end to end (the worker's start included), the worker's "
        "peak resident memory (VmHWM, sampled every 0.1 s), the path the H200 bound takes and each path's max "
        "error as a fraction of the tolerance (fp32 problems at 1e-4; a path passes at <= 0.5). Before: commit "
        f"{record.get('before_commit', '?')}; after: commit {record.get('after_commit', '?')}. The box "
        f"is shared, so times carry its load: {load(record, 'before')} before, {load(record, 'after')} after (1-minute "
        "load average on 2 cores).",
        "",
        "| problem | before: wall s | peak GiB | path | after: wall s | peak GiB | path | reduced instance |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    before = {r["problem"]: r for r in record.get("before", [])}
    if not before:  # one code measured: no before columns
        lines[2] = lines[2].split(" Before: commit")[0] + (
            f" Commit {record.get('after_commit', '?')}, at a load of {load(record, 'after')} (1-minute load average on "
            "2 cores)."
        )
        lines[4:6] = ["| problem | wall s | peak GiB | path | reduced instance |", "| --- | --- | --- | --- | --- |"]
    summary = _summary(record.get("after", []))
    if summary:
        lines[3:3] = ["", summary]
    for r in record.get("after", []):
        b = before.get(r["problem"], {})

        def cell(row: dict) -> str:
            if not row:
                return "- | - | -"
            path = row.get("path") or (
                "failed: " + row["failure"].split("failed: ")[-1][:90] if "failure" in row else "-"
            )
            return f"{row.get('wall_s', '-')} | {row.get('peak_gib', '-')} | {path}"

        cells = f"{cell(b)} | {cell(r)}" if before else cell(r)
        lines.append(f"| {r['problem']} | {cells} | {r.get('reduction') or '-'} |")
    lines += ["", "## Each path's error (after)", ""]
    names = ("fp8", "bf16", "fp16", "tf32", "bf16x2", "fp16x2", "bf16x3", "3xtf32", "bf16x6", "fp32")
    lines += ["| problem | " + " | ".join(names) + " | not measured |", "| --- " * (len(names) + 2) + "|"]
    for r in record.get("after", []):
        errs = r.get("errors") or {}
        lines.append(
            f"| {r['problem']} | "
            + " | ".join(fmt(errs.get(n)) for n in names)
            + f" | {', '.join(r.get('unmeasured') or {}) or '-'} |"
        )
    checks = [
        (v["problem"], "chunks", {p: (e["full"], e["predicted"]) for p, e in v["paths"].items()})
        for v in record.get("validation", [])
    ]
    for r in record.get("after", []):
        full = before.get(r["problem"], {}).get("errors")
        if full and r.get("errors"):  # a problem measured by both codes
            checks.append((r["problem"], "main", {p: (full.get(p), r["errors"].get(p)) for p in VALIDATE_PATHS}))
    if checks:
        lines += [
            "",
            "## Does the reduced instance predict the full problem?",
            "",
            "Each path's max error over the full problem on the same two input sets (full: computed in chunks of "
            "the batch by `--validate`, each sample's work unchanged, or main's own full-size measurement above) "
            "against what the measurement says (the reduced instance's max, scaled for the full element count). "
            "Agree: on the same side of the 0.5 margin.",
            "",
            "| problem | full from | path | full size | predicted | predicted / full | agree |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name, source, paths in checks:
            for p, (full, pred) in paths.items():
                ratio = pred / full if full and pred is not None else None
                agree = "-" if full is None or pred is None else "yes" if (full <= 0.5) == (pred <= 0.5) else "NO"
                lines.append(f"| {name} | {source} | {p} | {fmt(full)} | {fmt(pred)} | {fmt(ratio)} | {agree} |")
        lines += ["", "Reduced instances measured by `--validate`:", ""]
        lines += [f"- {v['problem']}: {v['reduction']}" for v in record.get("validation", [])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", nargs="*", help="KernelBench Level 2 numbers or bench/problems names")
    ap.add_argument("--kernelbench", type=Path, default=KERNELBENCH)
    ap.add_argument("--label", choices=("before", "after"), default="after")
    ap.add_argument("--code", type=Path, help="the checkout whose kforge_mcp to run (default: this one)")
    ap.add_argument("--commit", default=None, help="the commit of that code, for the record")
    ap.add_argument("--device-name", default="NVIDIA H200")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--validate", action="store_true")
    ap.add_argument("--chunk", type=int, default=0, help="batch rows per chunk in --validate (default: 1 GiB's)")
    ap.add_argument("--out", type=Path, default=RESULTS / "cpu.json")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(args.code or ROOT))
    os.chdir(args.code or ROOT)  # workers start here (python -m puts their start folder first on their path)
    record = json.loads(args.out.read_text()) if args.out.is_file() else {}
    if args.validate:
        record["validation"] = validate(args.problems or VALIDATE, args)
    else:
        names = args.problems or [str(n) for n in CONV + GEMM]
        record[args.label] = budget(names, args)
        record[f"{args.label}_commit"] = (
            args.commit
            or subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
            ).stdout.strip()
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, separators=(",", ":"), default=str) + "\n")
    args.out.with_suffix(".md").write_text(render(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
