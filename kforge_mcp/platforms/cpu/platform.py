"""The CPU: torch.profiler's CPU ops are its timeline; its peaks are placeholders (peaks.toml)."""

from __future__ import annotations

from kforge_mcp.platforms.base import Platform


class Cpu(Platform):
    name = "cpu"
    title = "the CPU"
    kinds = ("cpu",)
    order = 90
    guarded_state = "nothing: the CPU has no device-wide state a candidate could leave changed"
