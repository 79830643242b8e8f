"""The builds a CUDA candidate asks for, captured instead of run: load_inline swapped for a
recorder while the candidate is imported; and where a real build (load, on a GPU) keeps its files.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kforge_mcp.core.problem import Source
from kforge_mcp.core.process_env import variable
from kforge_mcp.core.source import import_source

CUTLASS_HEADER = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](cute|cutlass)/', re.M)


def cutlass_include_dir() -> str | None:
    """CuTe / CUTLASS C++ headers from the ``nvidia-cutlass`` wheel."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec and spec.origin:
        inc = Path(spec.origin).parent / "source" / "include"
        if (inc / "cute").is_dir():
            return str(inc)
    return None


def _as_list(value) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


@dataclass
class InlineBuild:
    """One load_inline call the candidate made, with where its strings sit in the file."""

    kwargs: dict[str, Any]
    call_line: int | None
    cuda: list[str] = field(default_factory=list)
    cpp: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.kwargs.get("name") or "extension")

    @property
    def functions(self) -> list[str]:
        fns = self.kwargs.get("functions") or []
        if isinstance(fns, str):
            return [fns]
        return list(fns.keys()) if isinstance(fns, dict) else list(fns)

    def flags(self) -> list[str]:
        flags = self.kwargs.get("extra_cuda_cflags") or []
        return [flags] if isinstance(flags, str) else list(flags)


class StubExtension(types.ModuleType):
    """What ``load_inline`` returns while compiling: its functions exist but do not run."""

    def __init__(self, name: str, functions: list[str]):
        super().__init__(name)
        for fn in functions:
            setattr(self, fn, self._stub(fn))

    @staticmethod
    def _stub(fn: str):
        def call(*args, **kwargs):
            raise RuntimeError(f"{fn}: kforge compile-only stub (the extension is built and run by verify on a GPU)")

        return call

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        return self._stub(item)


def _caller_line(path: Path) -> int | None:
    import traceback

    for frame in reversed(traceback.extract_stack()):
        if frame.filename == str(path):
            return frame.lineno
    return None


@contextlib.contextmanager
def patched_load_inline(replacement):
    """Swap ``torch.utils.cpp_extension.load_inline`` while the candidate is imported
    (``from torch.utils.cpp_extension import load_inline`` then binds the replacement)."""
    import torch.utils.cpp_extension as cpp_extension

    real = cpp_extension.load_inline
    cpp_extension.load_inline = replacement
    try:
        yield real
    finally:
        cpp_extension.load_inline = real


def capture_builds(source: Source, workdir: Path) -> tuple[types.ModuleType, list[InlineBuild]]:
    builds: list[InlineBuild] = []
    candidate_path: list[Path] = []

    def recorder(name, cpp_sources=None, cuda_sources=None, functions=None, *args, **kwargs):
        kwargs.update(name=name, cpp_sources=cpp_sources, cuda_sources=cuda_sources, functions=functions)
        line = _caller_line(candidate_path[0]) if candidate_path else None
        builds.append(InlineBuild(kwargs, line, _as_list(cuda_sources), _as_list(cpp_sources)))
        fns = functions if not isinstance(functions, str) else [functions]
        return StubExtension(str(name), list(fns.keys()) if isinstance(fns, dict) else list(fns or []))

    from kforge_mcp.core import source as loader

    real_write = loader.write_source

    def remember(src, wd, stem):  # the recorder needs the file path to find its call site
        path = real_write(src, wd, stem)
        candidate_path.append(path)
        return path

    loader.write_source = remember
    try:
        with patched_load_inline(recorder):
            module = import_source(source, workdir, "candidate")
    finally:
        loader.write_source = real_write
    return module, builds


def extension_cache_dir() -> Path:
    """Built extensions live under the engine home (the pool points TORCH_EXTENSIONS_DIR there)."""
    base = variable("TORCH_EXTENSIONS_DIR")
    if not base:
        triton_cache = variable("TRITON_CACHE_DIR")
        base = (
            str(Path(triton_cache).parent / "torch_extensions")
            if triton_cache
            else str(Path.home() / ".kforge" / "cache" / "torch_extensions")
        )
    path = Path(base) / "kforge-cuda"
    path.mkdir(parents=True, exist_ok=True)
    return path
