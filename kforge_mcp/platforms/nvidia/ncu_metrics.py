"""What kforge asks Nsight Compute for. A profile at depth 'metrics' asks for PROFILE_METRICS alone: the raw
metrics the parser (ncu.py) turns into the report's fields that the advice rules read, and no section. Its page
is the raw one, which holds metrics only, so ncu's guided-analysis sections added passes (replays of every kernel)
and nothing the profile read: ncu's own rule results appear on the details page and in .ncu-rep files, which
analyze_profile reads where a capture of them is given. The analysis corpus (``bench/analysis/capture.py``)
still asks for those sections and every metric of DEFAULT_METRICS, for ncu's rules and the details page.
Dependency-free on purpose, so a capture script on a GPU box can load this file alone.

Names are Nsight Compute 2025.x names on Hopper; a name the installed ncu does not know is
dropped (``ncu --query-metrics``) rather than failing the capture.
"""

from __future__ import annotations

# ncu's section identifiers (`ncu --list-sections`): speed of light, memory and compute workload,
# warp states, occupancy and launch statistics, and the source counters behind ncu's
# uncoalesced-access and bank-conflict rules.
SECTIONS = (
    "SpeedOfLight",
    "MemoryWorkloadAnalysis",
    "MemoryWorkloadAnalysis_Tables",
    "ComputeWorkloadAnalysis",
    "WarpStateStats",
    "Occupancy",
    "LaunchStats",
    "SourceCounters",
)

STALL_REASONS = (
    "long_scoreboard",
    "short_scoreboard",
    "barrier",
    "mio_throttle",
    "lg_throttle",
    "math_pipe_throttle",
    "wait",
    "gmma",
    "not_selected",
    "no_instruction",
    "branch_resolving",
    "membar",
    "drain",
    "imc_miss",
    "tex_throttle",
    "dispatch_stall",
    "misc",
    "sleeping",
    "selected",
)

# Per-pipe utilisation (ComputeWorkloadAnalysis' pipe chart): which unit does the math. On Hopper
# (ncu 2025.3) there is no gmma cycles counter: the hmma cycles counter covers HMMA and HGMMA alike,
# and the executed-instruction share of the gmma pipe (> 0) tells wgmma from mma.sync.
PIPES = ("fma", "alu", "fp64", "tensor_op_hmma", "tensor_op_imma", "shared", "tma")
INST_PIPES = ("tensor_op_gmma", "tensor_op_hmma", "fma", "fma_type_fp16", "alu", "lsu", "xu", "tma")
PIPE_METRICS = (
    [f"sm__pipe_{p}_cycles_active.avg.pct_of_peak_sustained_active" for p in PIPES]
    + [f"sm__inst_executed_pipe_{p}.avg.pct_of_peak_sustained_active" for p in INST_PIPES]
    + ["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"]
)

CORE_METRICS = [
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
    "launch__block_size",
    "launch__grid_size",
]

EXTRA_METRICS = (
    [
        # speed of light and memory hierarchy
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "l1tex__throughput.avg.pct_of_peak_sustained_active",
        "lts__throughput.avg.pct_of_peak_sustained_elapsed",
        "l1tex__t_sector_hit_rate.pct",
        "lts__t_sector_hit_rate.pct",
        "sm__cycles_elapsed.avg.per_second",
        # issue slots: idle slots with stalled warps = latency-bound
        "smsp__issue_active.avg.pct_of_peak_sustained_active",
        "sm__inst_executed.avg.per_cycle_active",
        "smsp__inst_executed.sum",
        # launch and occupancy
        "sm__maximum_warps_per_active_cycle_pct",
        "launch__waves_per_multiprocessor",
        "launch__sm_count",
        "launch__shared_mem_per_block_static",
        "launch__shared_mem_per_block_dynamic",
        "launch__thread_count",
        # global coalescing: sectors per request (4 = a coalesced fp32 warp access, 32 = one sector per thread)
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
        "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
        "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
        "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio",
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio",
        # shared-memory bank conflicts: wavefronts over instructions (1 = conflict-free)
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
        "smsp__sass_inst_executed_op_shared_ld.sum",
        "smsp__sass_inst_executed_op_shared_st.sum",
        # local memory: register spills and dynamically indexed arrays
        "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
        "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
        "smsp__sass_inst_executed_op_local_ld.sum",
        "smsp__sass_inst_executed_op_local_st.sum",
        # atomics and reductions to global memory
        "smsp__sass_inst_executed_op_global_atom.sum",
        "smsp__sass_inst_executed_op_global_red.sum",
        "l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum",
        "l1tex__t_requests_pipe_lsu_mem_global_op_red.sum",
        "lts__t_sectors_op_atom.sum",
        "lts__t_sectors_op_red.sum",
    ]
    + PIPE_METRICS
    + [f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in STALL_REASONS if r != "selected"]
)
DEFAULT_METRICS = CORE_METRICS + EXTRA_METRICS

# Asked for by the corpus only: no field of the report comes from them (tests/test_ncu_metrics.py checks both ways).
UNREAD_METRICS = {
    "sm__cycles_elapsed.avg.per_second",
    "sm__inst_executed.avg.per_cycle_active",
    "launch__thread_count",
    "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "smsp__sass_inst_executed_op_local_ld.sum",
    "smsp__sass_inst_executed_op_local_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_atom.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_red.sum",
    "lts__t_sectors_op_atom.sum",
    "lts__t_sectors_op_red.sum",
    # cache hit rates: the report holds them, no rule reads them
    "l1tex__t_sector_hit_rate.pct",
    "lts__t_sector_hit_rate.pct",
}
PROFILE_METRICS = [m for m in DEFAULT_METRICS if m not in UNREAD_METRICS]


def ncu_args(metrics: list[str] | None = None, sections: tuple[str, ...] = SECTIONS) -> list[str]:
    """ncu's arguments for the sections and metrics above (before the profiled program)."""
    args: list[str] = []
    for s in sections:
        args += ["--section", s]
    return args + ["--metrics", ",".join(metrics or DEFAULT_METRICS)]
