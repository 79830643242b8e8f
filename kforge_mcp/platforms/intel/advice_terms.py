"""The words Intel's profiles speak, as the analysis rules read them (the platform's ``vocabulary``): the vector
engines' (XVE) counters that unitrace --metric-query gives and unitrace.py stores per kernel."""

from __future__ import annotations

from kforge_mcp.platforms.base import EngineCounters, Vocabulary

VOCABULARY = Vocabulary(
    engine_counters=EngineCounters(
        stall="xve_stall_pct",
        idle="xve_idle_pct",
        active="xve_active_pct",
        stall_reason_prefix="xve_stall_",
        memory_gbps="gpu_memory_gbps",
        work_groups="work_groups",
    )
)
