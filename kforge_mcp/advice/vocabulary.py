"""The words the analysis reads, asked of the platform a profile came from (``Vocabulary``, platforms/base.py):
its pipes, stalls, SMs, memory sectors, library kernel names and metric keys. A rule reads them as
``v = vocabulary.of(report)``; a helper of one kernel takes them as ``v``. Nothing here, nor anywhere in advice/,
spells a vendor's term: each vendor's words live in its platform folder."""

from __future__ import annotations

from kforge_mcp import platforms
from kforge_mcp.platforms.base import Vocabulary
from kforge_mcp.profiling.report import ProfileReport


def of(report: ProfileReport) -> Vocabulary:
    """The vocabulary of the platform the report came from (empty where none is known)."""
    return platforms.profiled_on(report).vocabulary


def of_compile(report: ProfileReport) -> Vocabulary:
    """The vocabulary of the platform the report's compile builds for (the one that claims its arch)."""
    return platforms.builds_for(report.compiled.arch if report.compiled else None).vocabulary


def vendor(report: ProfileReport) -> str | None:
    """The name of the platform the report came from ('nvidia'); None where none is known."""
    platform = platforms.profiled_on(report)
    return None if platform is platforms.UNKNOWN else platform.name


def has_tensor_units(device_name: str | None) -> bool:
    """Whether a device of a peaks table (a roofline's 'H100 SXM') is one whose tensor pipes the advice reads."""
    return bool(platforms.table_platform(device_name).vocabulary.tensor_pipes)
