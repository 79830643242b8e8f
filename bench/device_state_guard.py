"""What an L2-pinning candidate (tests/cheats/pin_l2.py) does to the timings after it, with the device-state
guard (judge/device_guard.py) and with its put-back turned off: the honest twin, the cheat, the twin again,
in one process with one baseline cache, as in one worker. Also the guard's own cost per check.

    python bench/device_state_guard.py --device cuda:0 --out guard.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHEATS = ROOT / "tests" / "cheats"
ORDER = ["pin_l2_honest", "pin_l2", "pin_l2_honest", "pin_l2", "pin_l2_honest"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--out", default="device-state-guard.json")
    args = ap.parse_args()
    from kforge_mcp.core.settings import Settings
    from kforge_mcp.core.source import Source
    from kforge_mcp.devices.device import get_device
    from kforge_mcp.judge import device_guard
    from kforge_mcp.judge.baselines import BaselineCache
    from kforge_mcp.judge.verify import run_verify

    def wire(name: str) -> dict:
        path = CHEATS / f"{name}.py"
        return Source(text=path.read_text(), name=str(path)).to_wire()

    device = get_device(args.device)
    clean = device.snapshot()
    settle = device_guard.DeviceGuard.settle
    rows: dict = {"clean_state": clean, "runs": {}}
    for mode in ("guarded", "unguarded"):
        if mode == "unguarded":
            device_guard.DeviceGuard.settle = lambda self: None
        cache, runs = BaselineCache(), []
        for name in ORDER:
            req = {"problem": wire("row_sum_problem"), "candidate": wire(name), "target": "cuda", "device": args.device}
            r = run_verify(req, lambda m: None, Path(tempfile.mkdtemp()), cache, Settings.read().worker_memory_mb)
            t = r.timing
            runs.append(
                {
                    "candidate": name,
                    "verdict": r.verdict,
                    "candidate_ms": t.candidate.median_ms if t else None,
                    "eager_ms": t.eager.median_ms if t and t.eager else None,
                    "compiled_ms": t.compiled.median_ms if t and t.compiled else None,
                    "speedup": r.speedup,
                    "findings": sorted(f.code for f in r.findings),
                    "errors": r.errors,
                    "state_after": device.snapshot(),
                }
            )
            print(mode, json.dumps({k: v for k, v in runs[-1].items() if k != "state_after"}), flush=True)
        rows["runs"][mode] = runs
        device_guard.DeviceGuard.settle = settle
        left = device.restore(clean)  # the next mode starts on a clean device
        print(mode, "left changed after the put-back:", left, flush=True)

    guard = device_guard.DeviceGuard(args.device)
    costs = []
    for _ in range(200):
        t0 = time.perf_counter()
        guard.settle()
        costs.append((time.perf_counter() - t0) * 1e6)
    rows["settle_us"] = {"median": statistics.median(costs), "max": max(costs)}
    print("one check and put-back (us):", rows["settle_us"], flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
