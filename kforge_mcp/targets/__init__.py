"""The registry of targets: one package per programming model (targets/<name>/), whose target.py
defines a concrete Target subclass (adding a backend is one package here plus its prompts/<name>/
templates). KFORGE_TARGETS names more target packages outside kforge_mcp (folders, comma-separated),
e.g. docs/examples/numpy. The roots pass their settings (``use``); every target is made with them."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import sys
import types
from pathlib import Path

from kforge_mcp.core.errors import UnknownTargetError
from kforge_mcp.core.registry import Registry
from kforge_mcp.core.settings import Settings
from kforge_mcp.targets.base import Target


def _targets_in(module: types.ModuleType, settings: Settings) -> list[Target]:
    return [
        obj(settings)
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, Target)
        and not inspect.isabstract(obj)
        and obj.__module__ == module.__name__
    ]


def _import_package(path: str) -> types.ModuleType:
    """A target package outside kforge_mcp (a folder with __init__.py and target.py), importable by its
    candidates as ``kforge_target_<folder name>``; its target.py defines the Target."""
    folder = Path(path)
    name = f"kforge_target_{folder.name}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        if spec is None or spec.loader is None or not (folder / "target.py").is_file():
            raise ImportError(
                f"KFORGE_TARGETS: {path} is not a target package (a folder with __init__.py and target.py)"
            )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return importlib.import_module(f"{name}.target")


def discover(settings: Settings) -> dict[str, Target]:
    """Targets by name, in list order: this package's target packages, then the folders ``settings.targets``
    names (KFORGE_TARGETS)."""
    found: list[Target] = []
    for info in pkgutil.iter_modules(__path__):
        if info.ispkg:
            found += _targets_in(importlib.import_module(f"{__name__}.{info.name}.target"), settings)
    for path in filter(None, (p.strip() for p in (settings.targets or "").split(","))):
        found += _targets_in(_import_package(path), settings)
    return {t.name: t for t in sorted(found, key=lambda t: (t.order, t.name))}


TARGETS: Registry[Target] = Registry(discover)


def use(settings: Settings) -> None:
    """A root's settings: the targets are found (and made) with them."""
    TARGETS.use(settings)


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise UnknownTargetError(f"unknown target '{name}'; known targets: {', '.join(TARGETS)}") from None
