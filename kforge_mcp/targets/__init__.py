"""The registry of targets: every concrete Target subclass defined in a module of this package is
one (adding a backend is one file here plus its prompts/<name>/ templates). KFORGE_TARGETS names
more target files outside the package (paths, comma-separated), e.g. docs/examples/numpy_target.py."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import sys
import types
from pathlib import Path

from ..errors import UnknownTargetError
from ..settings import Settings
from .base import Target


def _targets_in(module: types.ModuleType) -> list[Target]:
    return [
        obj()
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, Target)
        and not inspect.isabstract(obj)
        and obj.__module__ == module.__name__
    ]


def _import_file(path: str) -> types.ModuleType:
    name = f"kforge_target_{Path(path).stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"KFORGE_TARGETS: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def discover(extra: str | None = None) -> dict[str, Target]:
    """Targets by name, in list order: this package's modules, then the files ``extra`` names."""
    found: list[Target] = []
    for info in pkgutil.iter_modules(__path__):
        found += _targets_in(importlib.import_module(f"{__name__}.{info.name}"))
    for path in filter(None, (p.strip() for p in (extra or "").split(","))):
        found += _targets_in(_import_file(path))
    return {t.name: t for t in sorted(found, key=lambda t: (t.order, t.name))}


TARGETS: dict[str, Target] = discover(Settings.read().targets)


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise UnknownTargetError(f"unknown target '{name}'; known targets: {', '.join(TARGETS)}") from None
