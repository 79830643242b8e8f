"""The normalized profile every parser produces and every rule reads, and the error a parser raises.

One shape for torch.profiler traces, Nsight Compute CSVs, proton, unitrace and xctrace profiles, so a
rule is written once. Fields a source cannot give stay None; rules skip what they cannot see.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kforge_mcp.core.schemas import CompileReport, JobAware, Roofline


class ProfileParseError(ValueError):
    """A captured file that cannot be read as the format it claims (or any format)."""


class StallReason(BaseModel):
    reason: str = Field(description="ncu warp stall reason, e.g. long_scoreboard (waiting on global memory)")
    cycles_per_issue: float = Field(description="average cycles a warp spends in this state per issued instruction")


class NcuRule(BaseModel):
    """One of Nsight Compute's own rule results (details page), kept as evidence."""

    kernel: str
    section: str = ""
    rule: str
    type: str = Field("", description="OPT (optimization opportunity), WRN, INF")
    description: str = ""
    speedup_type: str | None = Field(None, description="global (of the whole kernel) or local (of one part)")
    speedup_pct: float | None = Field(None, description="ncu's estimated speedup, percent of the kernel's time")


class KernelProfile(BaseModel):
    name: str
    kind: Literal["device", "cpu"] = "device"
    launches: int = 0
    device_ms: float = Field(0.0, description="total time over all captured launches (CPU ops: self CPU time)")
    mean_ms: float = 0.0
    launches_per_forward: float | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    registers: int | None = Field(None, description="registers per thread")
    shared_bytes: int | None = Field(None, description="shared memory per block (static + dynamic)")
    spills: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    achieved_occupancy_pct: float | None = Field(None, description="active warps, % of the SM's maximum")
    theoretical_occupancy_pct: float | None = None
    occupancy_limiters: dict[str, float] = Field(
        default_factory=dict, description="blocks per SM allowed by each resource"
    )
    occupancy_limiter: str | None = Field(
        None, description="the resource that binds: registers, shared_mem, warps, blocks"
    )
    waves_per_sm: float | None = None
    sm_throughput_pct: float | None = None
    memory_throughput_pct: float | None = None
    dram_throughput_pct: float | None = None
    dram_bytes_read: float | None = None
    dram_bytes_write: float | None = None
    global_load_sectors: float | None = None
    global_store_sectors: float | None = None
    global_load_sectors_per_request: float | None = None
    global_store_sectors_per_request: float | None = None
    global_load_bytes_per_sector: float | None = Field(
        None, description="useful bytes per 32-byte sector (32 = fully coalesced)"
    )
    global_store_bytes_per_sector: float | None = None
    tensor_pipe_pct: float | None = Field(
        None, description="busiest tensor-core pipe (gmma, hmma, imma) active, % of peak"
    )
    fma_pipe_pct: float | None = None
    pipes: dict[str, float] = Field(
        default_factory=dict,
        description="per-pipe utilisation, % of peak while active "
        "(fma, alu, fp64, tensor_op_gmma, tensor_op_hmma, shared, ...)",
    )
    issue_active_pct: float | None = Field(
        None, description="issue slots busy, % (low with stalled warps = latency-bound)"
    )
    l1_hit_pct: float | None = None
    l2_hit_pct: float | None = None
    shared_wavefronts: float | None = Field(None, description="shared-memory wavefronts (LSU loads + stores)")
    shared_bank_conflicts: float | None = Field(None, description="extra wavefronts caused by bank conflicts")
    shared_instructions: float | None = None
    local_sectors: float | None = Field(
        None, description="local-memory sectors moved (register spills, indexed arrays)"
    )
    atomic_instructions: float | None = Field(None, description="global atomic and reduction instructions executed")
    instructions: float | None = Field(None, description="warp instructions executed")
    category: str | None = Field(
        None, description="what the kernel is: gemm, conv, elementwise, reduction, copy, other"
    )
    compute_path: str | None = Field(
        None,
        description="the unit its math runs on: fma, hmma, wgmma (and the operand "
        "type when the name says it: tf32, bf16, fp16, fp8)",
    )
    kind_basis: str | None = Field(None, description="how category and compute_path were told: kernel name or metrics")
    top_stalls: list[StallReason] = Field(default_factory=list)
    metrics: dict[str, float] = Field(default_factory=dict, description="other raw profiler metrics kept as is")

    @property
    def warps_per_block(self) -> float | None:
        if self.num_warps:
            return float(self.num_warps)
        if self.block:
            threads = 1
            for b in self.block:
                threads *= max(int(b), 1)
            return threads / 32
        return None

    @property
    def blocks(self) -> int | None:
        if not self.grid:
            return None
        n = 1
        for g in self.grid:
            n *= max(int(g), 1)
        return n


class ProfileReport(JobAware):
    source: str = Field("", description="what produced it: torch.profiler, ncu, torch.profiler+ncu, proton")
    target: str | None = None
    device: str | None = None
    device_name: str | None = None
    execution: str | None = None
    sm_count: int | None = None
    kernels: list[KernelProfile] = Field(default_factory=list)
    forwards: int | None = Field(None, description="forwards captured")
    forwards_inferred: bool = Field(False, description="forwards were inferred from launch counts, not marked")
    launches_per_forward: float | None = None
    device_ms_per_forward: float | None = None
    host_overhead_ms: float | None = Field(None, description="CPU time spent launching kernels, per forward")
    roofline: Roofline | None = None
    ncu_rules: list[NcuRule] = Field(default_factory=list)
    weight_work: dict[str, float] = Field(
        default_factory=dict,
        description="per kernel launched on the weights alone in some launch: the share of its bytes those "
        "launches moved (work that can be done once per weight version)",
    )
    weights_read: dict[str, list[str]] = Field(
        default_factory=dict, description="per kernel of weight_work: the parameters its launches on weights read"
    )
    compiled: CompileReport | None = Field(
        None,
        description="the candidate compiled for an NVIDIA arch (registers, spills, shared memory, warps, stages, MMA "
        "instructions per kernel), where no GPU ran its kernels (a profile on the CPU)",
    )
    timeline: dict[str, float] = Field(
        default_factory=dict,
        description="device busy/idle over the captured span "
        "(span_ms, busy_ms, idle_ms, gaps, largest_gap_ms), when the source has intervals",
    )
    file: str | None = None
    notes: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    seconds: float = 0.0
    phases: dict[str, float] = Field(
        default_factory=dict,
        description="seconds per step (in the worker: build, warm_up, timeline, weight_work, roofline, metrics: the "
        "wait for the metrics profiler's own process after them, proton; paths_wait: the server's wait for the "
        "compute paths; metrics_profiler_ready, _forward, _exit: that process's own spans, beside the worker's): "
        "where a profile's time went",
    )
    # the profilers' own output by file name (trace.json, ncu.csv): the worker sends it, the MCP tool
    # keeps it as resources (tools/artifacts.py); never part of the report's JSON
    raw: dict[str, str] = Field(default_factory=dict, exclude=True)

    def device_kernels(self) -> list[KernelProfile]:
        return [k for k in self.kernels if k.kind == "device"]

    def total_device_ms(self) -> float:
        return sum(k.device_ms for k in self.device_kernels())
