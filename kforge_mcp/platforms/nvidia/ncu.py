"""Nsight Compute output: ``--csv --page raw`` (one row per launch, a units row, numbers with
thousands separators), ``--csv --page details`` (Section / Metric / Value rows plus ncu's own
rule rows with an Estimated Speedup), and ``.ncu-rep`` through ncu's ``ncu_report`` module.

ncu mixes ``==PROF==`` / ``==WARNING==`` / ``==ERROR==`` lines (and the profiled program's own
output) into stdout: only the CSV lines are kept.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections import OrderedDict

from kforge_mcp.core.profile import KernelProfile, NcuRule, ProfileParseError, ProfileReport, StallReason
from kforge_mcp.platforms.formats import set_forwards

# What kforge asks ncu for lives in ncu_metrics (dependency-free, so capture scripts share it).
from kforge_mcp.platforms.nvidia.ncu_metrics import INST_PIPES, PIPES, STALL_REASONS

_TIME_MS = {
    "ns": 1e-6,
    "nsecond": 1e-6,
    "us": 1e-3,
    "usecond": 1e-3,
    "ms": 1.0,
    "msecond": 1.0,
    "s": 1e3,
    "second": 1e3,
}
_BYTES = {
    "byte": 1.0,
    "kbyte": 1e3,
    "mbyte": 1e6,
    "gbyte": 1e9,
    "tbyte": 1e12,
    "kib": 1024.0,
    "mib": 1024.0**2,
    "gib": 1024.0**3,
}
_NOISE = re.compile(r"^==(PROF|WARNING|ERROR|INFO)==")


def strip_noise(text: str) -> tuple[str, list[str]]:
    """Keep the CSV part of ncu's stdout; return it and ncu's own ==...== messages."""
    messages, kept, started = [], [], False
    for line in text.splitlines():
        if _NOISE.match(line):
            messages.append(line.strip())
            continue
        if not started:
            if line.startswith('"ID"'):
                started = True
            else:
                continue  # the program's own output before the table
        if line.startswith('"'):
            kept.append(line)
    return "\n".join(kept) + ("\n" if kept else ""), messages


def number(text: str | None) -> float | None:
    if text is None:
        return None
    t = text.strip().replace(",", "")
    if not t or t.lower() in ("nan", "n/a", "-"):
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    return None if math.isnan(v) else v


def scaled(value: float | None, unit: str) -> float | None:
    """Times to ms, byte quantities to bytes; anything else unchanged."""
    if value is None:
        return None
    u = (unit or "").strip().lower()
    if u in _TIME_MS:
        return value * _TIME_MS[u]
    base = u.split("/")[0]
    if base in _BYTES and "/" not in u:
        return value * _BYTES[base]
    return value


def dims(text: str | None) -> list[int] | None:
    nums = re.findall(r"\d+", text or "")
    return [int(n) for n in nums] if nums else None


def _rows(text: str, path: str) -> list[list[str]]:
    body, messages = strip_noise(text)
    if not body.strip():
        errors = [m for m in messages if m.startswith("==ERROR==")]
        why = f"; ncu said: {' '.join(errors)[:300]}" if errors else ""
        raise ProfileParseError(
            f'{path}: no Nsight Compute CSV table found (expected a header row starting with "ID"){why}'
        )
    try:
        return list(csv.reader(io.StringIO(body)))
    except csv.Error as e:
        raise ProfileParseError(f"{path}: malformed CSV: {e}") from None


def is_details(header: list[str]) -> bool:
    return "Metric Name" in header and "Section Name" in header


# ---- raw page ----


def parse_raw(text: str, path: str = "<ncu raw csv>") -> list[dict]:
    """One dict per launch: id, name, block, grid, metrics {name: value in ms / bytes / as is}."""
    rows = _rows(text, path)
    header = rows[0]
    if is_details(header):
        raise ProfileParseError(f"{path}: this is an ncu details page, not a raw page")
    if "Kernel Name" not in header:
        raise ProfileParseError(f"{path}: not an Nsight Compute CSV: the header has no 'Kernel Name' column")
    if len(rows) < 2:
        raise ProfileParseError(f"{path}: ncu raw CSV is truncated: a header but no units row and no kernel rows")
    units = rows[1]
    has_units = not units[0].strip()  # the units row has an empty ID
    data = rows[2:] if has_units else rows[1:]
    if not has_units:
        units = [""] * len(header)
    if not data:
        raise ProfileParseError(f"{path}: ncu raw CSV has no kernel rows (no kernel was profiled?)")
    col = {name: i for i, name in enumerate(header)}
    launches = []
    for n, row in enumerate(data):
        if len(row) < col["Kernel Name"] + 1 or (len(row) < len(header) and n == len(data) - 1):
            raise ProfileParseError(
                f"{path}: ncu raw CSV is truncated: row {n + 3} has {len(row)} of {len(header)} columns"
            )
        metrics = {}
        for name, i in col.items():
            if "__" not in name or i >= len(row):
                continue
            v = scaled(number(row[i]), units[i] if i < len(units) else "")
            if v is not None:
                metrics[name] = v
        launches.append(
            {
                "id": row[col["ID"]] if "ID" in col else str(n),
                "name": row[col["Kernel Name"]],
                "block": dims(row[col["Block Size"]]) if "Block Size" in col else None,
                "grid": dims(row[col["Grid Size"]]) if "Grid Size" in col else None,
                "metrics": metrics,
                "device_name": row[col["device__attribute_display_name"]]
                if "device__attribute_display_name" in col
                else None,
                "cc": row[col["CC"]] if "CC" in col else None,
            }
        )
    return launches


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def kernel_from_launches(name: str, launches: list[dict]) -> KernelProfile:
    def m(key: str) -> float | None:
        return _mean([la["metrics"][key] for la in launches if key in la["metrics"]])

    times = [la["metrics"]["gpu__time_duration.sum"] for la in launches if "gpu__time_duration.sum" in la["metrics"]]
    k = KernelProfile(
        name=name,
        launches=len(launches),
        device_ms=sum(times),
        mean_ms=_mean(times) or 0.0,
        grid=launches[0]["grid"],
        block=launches[0]["block"],
    )
    if k.block is None and (block_size := m("launch__block_size")):
        k.block = [int(block_size), 1, 1]
    if k.grid is None and (grid_size := m("launch__grid_size")):
        k.grid = [int(grid_size), 1, 1]
    regs = m("launch__registers_per_thread")
    k.registers = int(regs) if regs is not None else None
    static, dynamic = m("launch__shared_mem_per_block_static"), m("launch__shared_mem_per_block_dynamic")
    if static is not None or dynamic is not None:
        k.shared_bytes = int((static or 0) + (dynamic or 0))
    k.achieved_occupancy_pct = m("sm__warps_active.avg.pct_of_peak_sustained_active")
    k.theoretical_occupancy_pct = m("sm__maximum_warps_per_active_cycle_pct")
    limits = {r: m(f"launch__occupancy_limit_{r}") for r in ("registers", "shared_mem", "warps", "blocks")}
    k.occupancy_limiters = {r: v for r, v in limits.items() if v is not None}
    if k.occupancy_limiters:
        order = ("blocks", "warps", "registers", "shared_mem")  # on a tie, the first named binds
        k.occupancy_limiter = min(k.occupancy_limiters, key=lambda r: (k.occupancy_limiters[r], order.index(r)))
    k.waves_per_sm = m("launch__waves_per_multiprocessor")
    k.sm_throughput_pct = m("sm__throughput.avg.pct_of_peak_sustained_elapsed")
    k.memory_throughput_pct = m("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")
    k.dram_throughput_pct = m("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")
    k.dram_bytes_read, k.dram_bytes_write = m("dram__bytes_read.sum"), m("dram__bytes_write.sum")
    for op, label in (("ld", "load"), ("st", "store")):
        sectors = m(f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum")
        requests = m(f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum")
        setattr(k, f"global_{label}_sectors", sectors)
        if sectors is not None and requests:
            setattr(k, f"global_{label}_sectors_per_request", sectors / requests)
        setattr(
            k,
            f"global_{label}_bytes_per_sector",
            m(f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.ratio"),
        )
    _read_pipes(k, m)
    k.issue_active_pct = m("smsp__issue_active.avg.pct_of_peak_sustained_active")
    k.l1_hit_pct, k.l2_hit_pct = m("l1tex__t_sector_hit_rate.pct"), m("lts__t_sector_hit_rate.pct")
    if k.dram_throughput_pct is None:
        k.dram_throughput_pct = m("dram__throughput.avg.pct_of_peak_sustained_elapsed")
    k.shared_wavefronts = _sum(m, "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{}.sum")
    k.shared_bank_conflicts = _sum(m, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{}.sum")
    k.shared_instructions = _sum(m, "smsp__sass_inst_executed_op_shared_{}.sum")
    k.local_sectors = _sum(m, "l1tex__t_sectors_pipe_lsu_mem_local_op_{}.sum")
    k.atomic_instructions = _sum(m, "smsp__sass_inst_executed_op_global_{}.sum", ("atom", "red"))
    k.instructions = m("smsp__inst_executed.sum")
    spill_requests = m("local_spilling_requests")
    if spill_requests is not None:
        k.metrics["local_spilling_requests"] = spill_requests
    stalls = []
    for r in STALL_REASONS:
        if r == "selected":
            continue  # issuing, not a stall
        v = m(f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio")
        if v:
            stalls.append(StallReason(reason=r, cycles_per_issue=round(v, 3)))
    k.top_stalls = sorted(stalls, key=lambda s: -s.cycles_per_issue)[:3]
    for key in ("launch__sm_count", "dram__bytes.sum.per_second"):
        if (value := m(key)) is not None:
            k.metrics[key] = value
    return k


def _read_pipes(k: KernelProfile, m) -> None:
    """Each pipe's activity (cycles, instructions) and the tensor and FMA pipes' share, from ``m`` (a metric's
    mean over the launches)."""
    for p in PIPES:
        v = m(f"sm__pipe_{p}_cycles_active.avg.pct_of_peak_sustained_active")
        if v is not None:
            k.pipes[p] = v
    for p in INST_PIPES:
        v = m(f"sm__inst_executed_pipe_{p}.avg.pct_of_peak_sustained_active")
        if v is not None:
            k.metrics[f"inst_pipe_{p}_pct"] = v
    if k.pipes.get("tensor_op_hmma") is not None and k.metrics.get("inst_pipe_tensor_op_gmma_pct", 0) > 0:
        # Hopper: the hmma cycles counter also counts HGMMA; gmma instructions say it was wgmma
        k.pipes["tensor_op_gmma"] = k.pipes.pop("tensor_op_hmma")
    if "lsu" not in k.pipes and "inst_pipe_lsu_pct" in k.metrics:
        k.pipes["lsu"] = k.metrics["inst_pipe_lsu_pct"]
    tensor_cycles = m("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")
    if tensor_cycles is not None:  # the tensor cores' own cycles: the hmma counter also counts what shares its pipe
        k.metrics["tensor_cycles_pct"] = tensor_cycles
    tensor = [
        v
        for v in (
            tensor_cycles,
            *(k.pipes.get(p) for p in ("tensor_op_gmma", "tensor_op_hmma", "tensor_op_imma")),
        )
        if v is not None
    ]
    k.tensor_pipe_pct = max(tensor) if tensor else None
    k.fma_pipe_pct = k.pipes.get("fma", k.metrics.get("inst_pipe_fma_pct"))


def _sum(m, pattern: str, ops: tuple[str, ...] = ("ld", "st")) -> float | None:
    values = [m(pattern.format(op)) for op in ops]
    return sum(v for v in values if v is not None) if any(v is not None for v in values) else None


def group_launches(launches: list[dict]) -> OrderedDict[str, list[dict]]:
    groups: OrderedDict[str, list[dict]] = OrderedDict()
    for launch in launches:
        groups.setdefault(launch["name"], []).append(launch)
    return groups


def report_from_raw(text: str, path: str = "<ncu raw csv>", forwards: int | None = None) -> ProfileReport:
    launches = parse_raw(text, path)
    groups = group_launches(launches)
    kernels = [kernel_from_launches(name, ls) for name, ls in groups.items()]
    return finish_report(kernels, launches, path, forwards, "ncu")


def finish_report(
    kernels: list[KernelProfile],
    launches: list[dict],
    path: str,
    forwards: int | None,
    source: str,
    rules: list[NcuRule] | None = None,
) -> ProfileReport:
    sm = next((int(la["metrics"]["launch__sm_count"]) for la in launches if "launch__sm_count" in la["metrics"]), None)
    report = set_forwards(
        ProfileReport(
            source=source,
            kernels=kernels,
            sm_count=sm,
            ncu_rules=rules or [],
            device_name=next((la["device_name"] for la in launches if la.get("device_name")), None),
            file=None if path.startswith("<") else path,
        ),
        forwards,
    )
    if report.device_name is None and launches and launches[0].get("cc"):
        report.notes.append(f"compute capability {launches[0]['cc']}; device name not in the file")
        report.device = f"sm_{launches[0]['cc'].replace('.', '')}"
    if report.forwards_inferred and report.forwards is not None and report.forwards > 1:
        report.notes.append(
            f"{report.forwards} forwards inferred from launch counts (gcd); kernels ran "
            f"{report.launches_per_forward:g} launches per forward"
        )
    return report


# ---- details page ----

_DETAILS_MAP = {
    ("GPU Speed Of Light Throughput", "Duration"): "gpu__time_duration.sum",
    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput"): "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    (
        "GPU Speed Of Light Throughput",
        "Memory Throughput",
    ): "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    ("GPU Speed Of Light Throughput", "DRAM Throughput"): "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    ("Launch Statistics", "Registers Per Thread"): "launch__registers_per_thread",
    ("Launch Statistics", "Block Size"): "launch__block_size",
    ("Launch Statistics", "Grid Size"): "launch__grid_size",
    ("Launch Statistics", "Waves Per SM"): "launch__waves_per_multiprocessor",
    ("Launch Statistics", "# SMs"): "launch__sm_count",
    ("Launch Statistics", "Static Shared Memory Per Block"): "launch__shared_mem_per_block_static",
    ("Launch Statistics", "Dynamic Shared Memory Per Block"): "launch__shared_mem_per_block_dynamic",
    ("Occupancy", "Achieved Occupancy"): "sm__warps_active.avg.pct_of_peak_sustained_active",
    ("Occupancy", "Theoretical Occupancy"): "sm__maximum_warps_per_active_cycle_pct",
    ("Occupancy", "Block Limit Registers"): "launch__occupancy_limit_registers",
    ("Occupancy", "Block Limit Shared Mem"): "launch__occupancy_limit_shared_mem",
    ("Occupancy", "Block Limit Warps"): "launch__occupancy_limit_warps",
    ("Occupancy", "Block Limit SM"): "launch__occupancy_limit_blocks",
    ("GPU Speed Of Light Throughput", "L1/TEX Cache Throughput"): "l1tex__throughput.avg.pct_of_peak_sustained_active",
    ("GPU Speed Of Light Throughput", "L2 Cache Throughput"): "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    ("Compute Workload Analysis", "Issue Slots Busy"): "smsp__issue_active.avg.pct_of_peak_sustained_active",
    ("Memory Workload Analysis", "L1/TEX Hit Rate"): "l1tex__t_sector_hit_rate.pct",
    ("Memory Workload Analysis", "L2 Hit Rate"): "lts__t_sector_hit_rate.pct",
    ("Memory Workload Analysis", "Local Memory Spilling Requests"): "local_spilling_requests",
    ("Instruction Statistics", "Executed Instructions"): "smsp__inst_executed.sum",
}


def parse_details(text: str, path: str = "<ncu details csv>") -> tuple[list[dict], list[NcuRule]]:
    rows = _rows(text, path)
    header = rows[0]
    if not is_details(header):
        raise ProfileParseError(f"{path}: not an ncu details page (no 'Section Name' / 'Metric Name' columns)")
    col = {name: i for i, name in enumerate(header)}
    need = max(col["Metric Value"], col["Kernel Name"])
    launches: OrderedDict[str, dict] = OrderedDict()
    rules: list[NcuRule] = []
    for n, row in enumerate(rows[1:]):
        if len(row) <= need:
            raise ProfileParseError(
                f"{path}: ncu details CSV is truncated: row {n + 2} has {len(row)} of {len(header)} columns"
            )
        get = lambda c: row[col[c]] if c in col and col[c] < len(row) else ""  # noqa: E731
        launch = launches.setdefault(
            get("ID"),
            {
                "id": get("ID"),
                "name": get("Kernel Name"),
                "metrics": {},
                "block": dims(get("Block Size")),
                "grid": dims(get("Grid Size")),
                "device_name": None,
                "cc": get("CC") or None,
            },
        )
        if get("Rule Name"):
            sp = number(get("Estimated Speedup"))
            rules.append(
                NcuRule(
                    kernel=get("Kernel Name"),
                    section=get("Section Name"),
                    rule=get("Rule Name"),
                    type=get("Rule Type"),
                    description=get("Rule Description"),
                    speedup_type=get("Estimated Speedup Type") or None,
                    speedup_pct=sp,
                )
            )
            continue
        key = _DETAILS_MAP.get((get("Section Name"), get("Metric Name")))
        if get("Section Name") == "Command line profiler metrics":  # the --metrics asked for, under their raw names
            key = get("Metric Name")
        if key:
            v = scaled(number(get("Metric Value")), get("Metric Unit"))
            if v is not None:
                launch["metrics"][key] = v
    if not launches:
        raise ProfileParseError(f"{path}: ncu details CSV has no kernel rows")
    return list(launches.values()), rules


def report_from_details(text: str, path: str = "<ncu details csv>", forwards: int | None = None) -> ProfileReport:
    launches, rules = parse_details(text, path)
    groups = group_launches(launches)
    kernels = [kernel_from_launches(name, ls) for name, ls in groups.items()]
    return finish_report(kernels, launches, path, forwards, "ncu details", aggregate_rules(rules))


def aggregate_rules(rules: list[NcuRule]) -> list[NcuRule]:
    """One entry per (kernel, rule, speedup type), with the mean speedup over launches."""
    grouped: OrderedDict[tuple, list[NcuRule]] = OrderedDict()
    for r in rules:
        grouped.setdefault((r.kernel, r.rule, r.type, r.speedup_type, r.description[:60]), []).append(r)
    out = []
    for rs in grouped.values():
        sps = [r.speedup_pct for r in rs if r.speedup_pct is not None]
        out.append(rs[0].model_copy(update={"speedup_pct": _mean(sps)}))
    return out


def report_from_csv(text: str, path: str = "<ncu csv>", forwards: int | None = None) -> ProfileReport:
    rows = _rows(text, path)
    if is_details(rows[0]):
        return report_from_details(text, path, forwards)
    return report_from_raw(text, path, forwards)
