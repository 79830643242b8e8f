"""The registry of platforms: one package per vendor (platforms/<vendor>/), whose platform.py defines a concrete
Platform subclass and whose peaks.toml holds its peaks (adding a vendor is one package here). KFORGE_PLATFORMS
names more platform packages outside kforge_mcp (folders, comma-separated), importable as
``kforge_platform_<folder name>``.

What the engine asks of the vendors goes through here: which platform serves a torch device, which one a profile
came from (whose vocabulary the analysis reads), the peaks of a device named in a report or by a user, the profile
formats a file may be in, a profiler by name, and the compile checks for an arch and the platform it builds for."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import re
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.profile import ProfileReport
from kforge_mcp.core.registry import Registry
from kforge_mcp.core.schemas import CompileReport, Diagnostic
from kforge_mcp.core.settings import Settings
from kforge_mcp.platforms.base import Peaks, Platform, Profiler
from kforge_mcp.platforms.formats import ProfileFormat

UNKNOWN = Platform()  # serves a device no platform identifies: no vendor profiler, nothing guarded, no peaks


def _platforms_in(module: types.ModuleType) -> list[Platform]:
    return [
        obj()
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, Platform)
        and obj is not Platform
        and not inspect.isabstract(obj)
        and obj.__module__ == module.__name__
    ]


def _import_package(path: str) -> types.ModuleType:
    """A platform package outside kforge_mcp (a folder with __init__.py and platform.py), importable as
    ``kforge_platform_<folder name>``; its platform.py defines the Platform."""
    folder = Path(path)
    name = f"kforge_platform_{folder.name}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        if spec is None or spec.loader is None or not (folder / "platform.py").is_file():
            raise ImportError(
                f"KFORGE_PLATFORMS: {path} is not a platform package (a folder with __init__.py and platform.py)"
            )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return importlib.import_module(f"{name}.platform")


def discover(extra: str | None = None) -> dict[str, Platform]:
    """Platforms by name, in the order they are asked: this package's vendor packages, then the folders
    ``extra`` names, sorted by ``order``."""
    found: list[Platform] = []
    for info in pkgutil.iter_modules(__path__):
        if info.ispkg:
            found += _platforms_in(importlib.import_module(f"{__name__}.{info.name}.platform"))
    for path in filter(None, (p.strip() for p in (extra or "").split(","))):
        found += _platforms_in(_import_package(path))
    return {p.name: p for p in sorted(found, key=lambda p: (p.order, p.name))}


PLATFORMS: Registry[Platform] = Registry(lambda settings: discover(settings.platforms))


def use(settings: Settings) -> None:
    """A root's settings: the platforms are found from them (KFORGE_PLATFORMS)."""
    PLATFORMS.use(settings)


def identify(kind: str, build: Mapping[str, Any]) -> Platform:
    """The platform that serves a torch device of ``kind`` on this torch ``build`` (torch/version.py's
    constants); UNKNOWN where none does (e.g. a ROCm build without an AMD platform)."""
    return next((p for p in PLATFORMS.values() if p.identifies(kind, build)), UNKNOWN)


def _devices() -> dict[str, Peaks]:
    return {key: peaks for p in PLATFORMS.values() for key, peaks in p.peaks.devices.items()}


def _aliases() -> list[tuple[tuple[str, ...], str]]:
    return [alias for p in PLATFORMS.values() for alias in p.peaks.aliases]


def device_models() -> list[str]:
    """Every device of every platform's peaks table."""
    return list(_devices())


def _named(name: str | None) -> Platform | None:
    """The platform whose peaks table names a device ('NVIDIA H100 80GB HBM3', or 'sm_90' from an ncu file)."""
    lowered = (name or "").lower()
    if not lowered:
        return None
    return next(
        (
            p
            for p in PLATFORMS.values()
            if any(k.lower() == lowered for k in p.peaks.devices)
            or any(all(n in lowered for n in needles) for needles, _ in p.peaks.aliases)
        ),
        None,
    )


def profiled_on(report: ProfileReport) -> Platform:
    """The platform a profile came from (what the analysis rules read the ``vocabulary`` of): the one whose table
    names its device name or device, else the one whose profiler wrote it (its source: 'torch.profiler+ncu'),
    else the one that serves its device kind on this torch build's terms ('xpu:0'), else UNKNOWN."""
    named = _named(report.device_name) or _named(report.device)
    if named is not None:
        return named
    wrote = set(re.split(r"[+ ]", report.source))
    by_profiler = next((p for p in PLATFORMS.values() if any(pr.name in wrote for pr in p.profilers)), None)
    return by_profiler or identify((report.device or "").split(":")[0], {})


def table_platform(device_name: str | None) -> Platform:
    """The platform whose peaks table names a device (a roofline's 'H100 SXM'); UNKNOWN where none does."""
    return _named(device_name) or UNKNOWN


def builds_for(arch: str | None) -> Platform:
    """The platform whose devices a compile for ``arch`` builds for ('sm_90a': NVIDIA); UNKNOWN where none claims it."""
    return next((p for p in PLATFORMS.values() if p.compiles_for(arch)), UNKNOWN)


def device_arch(device_name: str | None) -> str | None:
    """The arch a device of a peaks table compiles for ('H100 SXM': 'sm_90a'); None where its platform names none."""
    return next((a for p in PLATFORMS.values() if (a := p.vocabulary.arch_by_device.get(device_name or ""))), None)


def default_peaks() -> Peaks:
    """The figures used for a device no table knows: the first platform's table that names a default."""
    table = next((p.peaks for p in PLATFORMS.values() if p.peaks.default), None)
    if table is None or table.default is None:
        raise InputError("no platform's peaks table names a default device")
    return table.devices[table.default]


def lookup_peaks(device_name: str | None) -> tuple[Peaks, str | None]:
    """The table entry for a device name; a note when it was a guess."""
    name = (device_name or "").lower()
    devices = _devices()
    if name:
        for key, peaks in devices.items():
            if key.lower() == name:
                return peaks, None
        for needles, key in _aliases():
            if all(n in name for n in needles):
                note = None if key.lower().split()[0] in name else f"'{device_name}' taken as {key}"
                return devices[key], note
    fallback = default_peaks()
    return fallback, f"device '{device_name or 'unknown'}' not in the peaks table: {fallback.name} figures used"


def table_device(name: str) -> str:
    """The peaks table's name for a device a user names ('h200', 'H100 SXM', 'b200'): its key, or the
    first alias that matches; an InputError listing the tables otherwise (never the default's figures)."""
    lowered = name.strip().lower()
    devices = _devices()
    for key in devices:
        if key.lower() == lowered:
            return key
    for needles, key in _aliases():
        if lowered and all(n in lowered for n in needles):
            return key
    raise InputError(f"device model '{name}' is not in the peaks table; known: {', '.join(devices)}")


def profile_formats() -> list[ProfileFormat]:
    """Every format the platforms' profilers write, platform by platform."""
    return [f for p in PLATFORMS.values() for profiler in p.profilers for f in profiler.formats]


def profiler(name: str) -> Profiler | None:
    """A platform's profiler by its name ('ncu', 'xctrace')."""
    return next((pr for p in PLATFORMS.values() for pr in p.profilers if pr.name == name), None)


def metrics_profilers() -> str:
    """What captures depth 'metrics', and on which vendor's devices: 'Nsight Compute (ncu) on NVIDIA, ...'."""
    return ", ".join(f"{pr.title} on {p.title}" for p in PLATFORMS.values() if (pr := p.metrics_profiler()))


def compile_diagnostics(report: CompileReport) -> list[Diagnostic]:
    """What the limits of the platforms a compile's arch builds for say of it (nothing for an arch no
    platform claims)."""
    return [d for p in PLATFORMS.values() if p.compiles_for(report.arch) for d in p.compile_diagnostics(report)]
