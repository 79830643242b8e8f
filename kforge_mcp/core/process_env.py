"""This process's environment, read and changed in one place: what the toolchains honour (where the CUDA toolkit
is, where torch and Triton keep their caches, the arch list torch builds for, CuTe DSL's dump folder) and the
environment a child process starts with. KFORGE_* settings are read by core/settings.py; a worker's scrubbed
environment is built by runtime/environment.py from ``variables()``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

ARCH_LIST = "TORCH_CUDA_ARCH_LIST"


def variables() -> Mapping[str, str]:
    """The environment as it is now (read-only use: copy it to change it)."""
    return os.environ


def variable(name: str) -> str | None:
    """One variable a toolchain honours (CUDA_HOME, TORCH_EXTENSIONS_DIR, TRITON_CACHE_DIR, ...); None when unset."""
    return os.environ.get(name)


def child_environment(drop: Iterable[str] = (), pythonpath_first: str | None = None) -> dict[str, str]:
    """This process's environment for a child: less ``drop``, with ``pythonpath_first`` ahead on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in set(drop)}
    if pythonpath_first is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath_first, os.environ.get("PYTHONPATH")]))
    return env


@contextmanager
def torch_cuda_arch_list(value: str) -> Iterator[None]:
    """TORCH_CUDA_ARCH_LIST set to ``value`` while the block runs (torch plans its builds from it), as it was after."""
    before = os.environ.get(ARCH_LIST)
    os.environ[ARCH_LIST] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ARCH_LIST, None)
        else:
            os.environ[ARCH_LIST] = before


def set_default(name: str, value: str) -> str:
    """A variable a library reads once (CUTE_DSL_DUMP_DIR, KINETO_LOG_LEVEL): set to ``value`` unless set; its value."""
    return os.environ.setdefault(name, value)


def set_variable(name: str, value: str) -> None:
    os.environ[name] = value
