"""Capture the before/after pairs of pairs.py on a GPU: both kernels timed with kforge's verify timing
(interleaved rounds, device events, an L2 flush before each call), and the before kernel profiled with
Nsight Compute with the metrics capture.py uses, all pairs in one ncu run.

    PYTHONPATH=$PWD python bench/analysis/pair_capture.py --out DIR [--budget-s S] [PAIR ...]

Writes DIR/pairs.json (per pair: the rule, the change, both timings, the check of both against a torch
reference, the problem's FLOPs and bytes) and DIR/ncu-raw-N.csv: the raw pages of the before launches,
one per ncu process (``ncu_chunks`` in pairs.json), each pair's launches after a ``pair_marker_kernel``
launch.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import capture  # noqa: E402  (ncu discovery, metric pruning, exports)
import pairs  # noqa: E402

T0 = time.time()


def log(*parts) -> None:
    print(f"[{time.time() - T0:6.1f}s]", *parts, flush=True)


def timing_module():
    from kforge_mcp.judge import timing

    return timing


def child_time(names: list[str], out: Path, budget_s: float) -> None:
    """Time every pair (append one JSON line each to DIR/timings.jsonl)."""
    import torch

    timing = timing_module()
    timing.bind_device_clocks("cuda")
    with open(out / "timings.jsonl", "a") as f:
        for name in names:
            rec = {"name": name}
            t = time.time()
            try:
                p = pairs.build(name, "cuda")
                rec["check"] = p.check()
                torch.cuda.synchronize()
                stats, samples, _ = timing.time_interleaved(
                    {"before": p.before, "after": p.after}, "cuda", budget_s=budget_s, rounds=5, warmup_calls=3
                )
                rec["before"] = stats["before"].model_dump()
                rec["after"] = stats["after"].model_dump()
                lo, hi = timing.speedup_interval(samples["before"], samples["after"])
                rec["speedup_ci95"] = [lo, hi]
                rec["meta"] = p.meta
                del p
                torch.cuda.empty_cache()
            except Exception as e:  # noqa: BLE001  (record and go on to the next pair)
                rec["error"] = f"{type(e).__name__}: {e}"[:2000]
                rec["traceback"] = traceback.format_exc()[-3000:]
            rec["seconds"] = round(time.time() - t, 2)
            f.write(json.dumps(rec) + "\n")
            f.flush()
            b, a = rec.get("before", {}).get("median_ms"), rec.get("after", {}).get("median_ms")
            log(
                f"{name}: before {b} ms, after {a} ms, check {rec.get('check', {}).get('ok')}, "
                f"{rec['seconds']}s {rec.get('error', '')[:300]}"
            )


def child_ncu(names: list[str], offset: int = 0) -> None:
    """Under ncu: per pair a marker launch, then the before kernels once, inside a profiler range."""
    import torch

    mark = torch.zeros(1, device="cuda", dtype=torch.int32)
    for i, name in enumerate(names):
        p, err = None, None
        try:
            p = pairs.build(name, "cuda")
            for _ in range(2):
                p.before()
            pairs.pair_marker_kernel[(1,)](mark, i)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001  (the marker still goes out, so the pairs after stay aligned)
            p, err = None, e
        torch.cuda.cudart().cudaProfilerStart()
        pairs.pair_marker_kernel[(1,)](mark, offset + i)
        if p is not None:
            p.before()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        del p
        torch.cuda.empty_cache()
        print(
            f"profiled {name}" if err is None else f"ncu child: {name} failed: {type(err).__name__}: {err}", flush=True
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", choices=["time", "ncu"])
    ap.add_argument("--out", default="/tmp/pair-capture")
    ap.add_argument("--budget-s", type=float, default=0.3, help="timing budget per kernel per pair")
    ap.add_argument("--chunk", type=int, default=11, help="pairs per ncu process")
    ap.add_argument("--offset", type=int, default=0, help="(ncu child) index of the first pair, for the markers")
    ap.add_argument("--budget-total-s", type=float, default=320.0, help="start no ncu chunk after this")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    out = Path(args.out)
    names = args.names or list(pairs.PAIRS)
    if args.child == "time":
        return child_time(names, out, args.budget_s)
    if args.child == "ncu":
        return child_ncu(names, args.offset)

    out.mkdir(parents=True, exist_ok=True)
    me = str(Path(__file__).resolve())
    # timing: one child; if it dies (a crash in a kernel), go on with the pairs it did not reach
    (out / "timings.jsonl").unlink(missing_ok=True)
    todo = list(names)
    for _ in range(3):
        rc, text = capture.sh(
            [sys.executable, me, "--child", "time", "--out", str(out), "--budget-s", str(args.budget_s), *todo], 420
        )
        log(f"timing child rc {rc}\n{text.strip()[-6000:]}")
        done = {json.loads(ln)["name"] for ln in (out / "timings.jsonl").read_text().splitlines() if ln.strip()}
        todo = [n for n in todo if n not in done]
        if not todo:
            break
        log(f"not timed yet: {todo}; the next one is recorded as failed and skipped")
        with open(out / "timings.jsonl", "a") as f:
            f.write(json.dumps({"name": todo[0], "error": f"timing child died (rc {rc})"}) + "\n")
        todo = todo[1:]

    ncu = capture.find_ncu()
    rc, ver = capture.sh([ncu, "--version"], 60)
    ncu_version = ver.strip().splitlines()[-1] if ver.strip() else "?"
    metrics_mod = capture.load_ncu_metrics()
    kept, prune = capture.prune_metrics(ncu, metrics_mod, out)
    # ncu: chunks of pairs, one process each, so a run cut short keeps the chunks it finished
    chunks = [names[i : i + args.chunk] for i in range(0, len(names), args.chunk)]
    codes, cmd = {}, []
    for ci, chunk in enumerate(chunks):
        if time.time() - T0 > args.budget_total_s:
            log(f"SKIP ncu chunk {ci} {chunk}: over the {args.budget_total_s:g} s budget")
            continue
        stem = out / f"pairs-{ci}"
        cmd = [ncu, "--profile-from-start", "off", "-o", str(stem), "--force-overwrite", *metrics_mod.ncu_args(kept)]
        cmd += [sys.executable, me, "--child", "ncu", "--offset", str(ci * args.chunk), *chunk]
        rc, text = capture.sh(cmd, 150)
        log(f"ncu chunk {ci} rc {rc}\n" + "\n".join(ln for ln in text.splitlines() if "==PROF==" not in ln)[-3000:])
        rep = stem.with_suffix(".ncu-rep")
        if rep.exists():
            codes[ci] = capture.export_pages(ncu, rep, stem)
            rep.unlink()
            stem.with_suffix(".ncu-details.csv").unlink(missing_ok=True)
            if stem.with_suffix(".ncu-raw.csv").exists():
                os.replace(stem.with_suffix(".ncu-raw.csv"), out / f"ncu-raw-{ci}.csv")
    import torch
    import triton

    timings = {}
    for ln in (out / "timings.jsonl").read_text().splitlines():
        if ln.strip():
            rec = json.loads(ln)
            timings[rec["name"]] = rec
    result = {
        "env": {
            "device": torch.cuda.get_device_name(0),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "ncu_version": ncu_version,
            "ncu_command": shlex.join(cmd),
            "ncu_chunks": chunks,
            "metrics_dropped": prune.get("dropped", []),
            "exports": codes,
            "timing": "kforge verify timing: interleaved rounds of device events, L2 flushed before each call, "
            f"about {args.budget_s:g} s per kernel",
        },
        "order": names,
        "pairs": {
            n: {"rule": pairs.PAIRS[n][0], "change": pairs.PAIRS[n][2], **timings.get(n, {"error": "not timed"})}
            for n in names
        },
    }
    (out / "pairs.json").write_text(json.dumps(result, indent=1))
    for f in out.glob("_probe*"):
        f.unlink()
    log("finished")


if __name__ == "__main__":
    main()
