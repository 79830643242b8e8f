"""Print the bottleneck metrics of each capture (raw ncu page + meta.json) as a markdown table.

    python bench/analysis/summarize.py [--captures DIR]

Standard library only. Sums over all profiled kernels of a case (small_launch_chain has 8).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from packed_captures import unpacked  # noqa: E402

COLS = {
    "dur_us": "gpu__time_duration.sum",
    "sm%": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "mem%": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram%": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_rd": "dram__bytes_read.sum",
    "dram_wr": "dram__bytes_write.sum",
    "ld_sec": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "ld_req": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "st_sec": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "st_req": "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "bank_ld": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "bank_st": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "wf_ld": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "lds_inst": "smsp__sass_inst_executed_op_shared_ld.sum",
    "local_ld_sec": "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
    "local_st_sec": "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
    "red_inst": "smsp__sass_inst_executed_op_global_red.sum",
    "atom_inst": "smsp__sass_inst_executed_op_global_atom.sum",
    "lts_red_sec": "lts__t_sectors_op_red.sum",
    "tensor%": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "hmma%": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "gmma_inst%": "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active",
    "fma%": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "alu%": "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active",
    "issue%": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "warps%": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "regs": "launch__registers_per_thread",
}
STALL_PREFIX = "smsp__average_warps_issue_stalled_"


def read_raw(path: Path) -> tuple[list[str], list[str], list[list[str]]]:
    rows = list(csv.reader(path.open(newline="")))
    header = rows[0]
    assert header[0] == "ID", path
    units = rows[1] if len(rows) > 1 and not rows[1][0] else []
    data = rows[2:] if units else rows[1:]
    return header, units, data


def num(s: str) -> float | None:
    try:
        return float(s.replace(",", ""))
    except (ValueError, AttributeError):
        return None


def case_metrics(path: Path) -> dict:
    header, units, data = read_raw(path)
    idx = {h: i for i, h in enumerate(header)}
    out = {"kernels": len(data)}
    for key, metric in COLS.items():
        if metric not in idx:
            out[key] = None
            continue
        vals = [num(r[idx[metric]]) for r in data]
        vals = [v for v in vals if v is not None]
        unit = units[idx[metric]] if units else ""
        if not vals:
            out[key] = None
        elif metric.endswith(".sum") and not metric.startswith("gpu__time"):
            out[key] = sum(vals)
        elif metric.startswith("gpu__time_duration"):
            scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "nsecond": 1e-3, "ms": 1e3, "msecond": 1e3}.get(unit, 1e-3)
            out[key] = sum(vals) * scale
        else:
            out[key] = sum(vals) / len(vals)
        if metric in ("dram__bytes_read.sum", "dram__bytes_write.sum") and unit:
            out[key] *= {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}.get(
                unit, 1
            )
    stalls = {
        h[len(STALL_PREFIX) :].replace("_per_issue_active.ratio", ""): num(data[0][i])
        for h, i in idx.items()
        if h.startswith(STALL_PREFIX) and h.endswith("_per_issue_active.ratio")
    }
    stalls = {k: v for k, v in stalls.items() if v}
    out["top_stalls"] = sorted(stalls.items(), key=lambda kv: -kv[1])[:3]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--captures", default=str(HERE / "captures"))
    args = ap.parse_args()
    with unpacked(Path(args.captures)) as cap:
        summarize(cap)


def summarize(cap: Path) -> None:
    manifest = json.loads((HERE / "manifest.json").read_text())["cases"]
    for case in manifest:
        name = case["name"]
        raw = cap / f"{name}.ncu-raw.csv"
        meta_path = cap / f"{name}.meta.json"
        if not raw.exists():
            print(f"## {name}: no capture")
            continue
        meta = json.loads(meta_path.read_text())
        m = case_metrics(raw)
        f = lambda v: "n/a" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))  # noqa: E731
        ratio = lambda a, b: None if not m.get(a) or not m.get(b) else m[a] / m[b]  # noqa: E731
        print(
            f"## {name} [{case['label']}] measured {meta.get('measured_ms'):.4f} ms, ncu {f(m['dur_us'])} us "
            f"({m['kernels']} kernel(s)), check {meta.get('check')}"
        )
        print("   " + ", ".join(f"{k}={f(v)}" for k, v in m.items() if k not in ("top_stalls", "dur_us")))
        print(
            f"   ld sectors/req={f(ratio('ld_sec', 'ld_req'))} st sectors/req={f(ratio('st_sec', 'st_req'))} "
            f"shared ld wavefronts/inst={f(ratio('wf_ld', 'lds_inst'))} stalls={m['top_stalls']}"
        )


if __name__ == "__main__":
    main()
