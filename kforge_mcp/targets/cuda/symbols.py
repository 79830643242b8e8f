"""The symbols an object needs and defines, as ``nm -C`` names them: which template kernels the host unit
calls, and whether a device object holds them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


class SymbolsUnread(Exception):
    """nm is missing: an object's symbols cannot be read."""


def undefined_symbols(obj: Path) -> list[str]:
    """The demangled names an object needs from others (``nm -C --undefined-only``)."""
    return [name for kind, name in _symbols(obj, "--undefined-only") if kind == "U"]


def defined_symbols(obj: Path) -> set[str]:
    """The demangled names an object defines (``nm -C --defined-only``)."""
    return {name for _, name in _symbols(obj, "--defined-only")}


def _symbols(obj: Path, which: str) -> list[tuple[str, str]]:
    nm = shutil.which("nm")
    if nm is None:
        raise SymbolsUnread("nm not found: the template kernels' instantiations cannot be read")
    out = subprocess.run([nm, "-C", which, str(obj)], capture_output=True, text=True, timeout=60)
    found = []
    for line in out.stdout.splitlines():  # "                 U name" or "0000000000000000 W name"
        parts = line.split(None, 1) if line[:1].isspace() else line.split(None, 2)[1:]
        if len(parts) == 2:
            found.append((parts[0], parts[1]))
    return found
