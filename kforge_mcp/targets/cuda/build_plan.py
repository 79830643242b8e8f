"""The build torch would run for a load_inline call (its build.ninja: flags for this torch, toolkit and arch),
written by torch without running it, and the toolchain's versions for cache keys."""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kforge_mcp.targets.nvidia import find_tool


@dataclass
class Plan:
    """What torch would run, read from the build.ninja it wrote."""

    cxx: list[str]
    nvcc: list[str]
    cflags: list[str]
    post_cflags: list[str]
    cuda_cflags: list[str]
    cuda_post_cflags: list[str]
    ldflags: list[str]
    main_cpp: str
    cuda_cu: str

    @property
    def host_cflags(self) -> list[str]:
        # the module name matters to main.cpp only; leaving it out keeps the precompiled header valid
        return [f for f in self.cflags if not f.startswith("-DTORCH_EXTENSION_NAME=")]


CUDA_CONFIG_HEADER = "c10/cuda/impl/cuda_cmake_macros.h"


NO_CUDA_CONFIG = "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE"


def cpu_torch_flags() -> list[str]:
    """A CPU build of torch ships c10/cuda's headers without the one its CUDA build generates, which on
    Linux only marks c10_cuda's exports; this define tells c10/cuda/CUDAMacros.h to do without it."""
    from torch.utils.cpp_extension import include_paths

    return [] if (Path(include_paths()[0]) / CUDA_CONFIG_HEADER).exists() else [NO_CUDA_CONFIG]


def plan_build(real_load_inline, module_name: str, cpp_src, cuda_src, functions, kwargs: dict, where: Path) -> Plan:
    """Let torch write its build (flags for this torch, toolkit and arch) without running it."""
    import torch.utils.cpp_extension as ce

    where.mkdir(parents=True, exist_ok=True)
    saved = (ce._run_ninja_build, ce._import_module_from_library, ce.JIT_EXTENSION_VERSIONER, ce.CUDA_HOME)
    ce._run_ninja_build = lambda *a, **k: None
    ce._import_module_from_library = lambda *a, **k: None
    ce.JIT_EXTENSION_VERSIONER = ce.ExtensionVersioner()  # a fresh one: torch keeps the name as given
    nvcc = find_tool("nvcc")
    if ce.CUDA_HOME is None and nvcc:  # a CPU build of torch: the toolkit found here stands in for its own
        ce.CUDA_HOME = str(Path(nvcc).resolve().parents[1])
    try:
        real_load_inline(
            module_name, cpp_src, cuda_sources=cuda_src, functions=functions, build_directory=str(where), **kwargs
        )
    finally:
        ce._run_ninja_build, ce._import_module_from_library, ce.JIT_EXTENSION_VERSIONER, ce.CUDA_HOME = saved
    ninja = (where / "build.ninja").read_text()
    var = {m.group(1): m.group(2) for m in re.finditer(r"^(\w+) = (.*)$", ninja, re.M)}
    no_cuda_config = cpu_torch_flags()
    return Plan(
        cxx=shlex.split(var.get("cxx", "c++")),
        nvcc=shlex.split(var["nvcc"]),
        cflags=shlex.split(var.get("cflags", "")) + no_cuda_config,
        post_cflags=shlex.split(var.get("post_cflags", "")),
        cuda_cflags=shlex.split(var.get("cuda_cflags", "")) + no_cuda_config,
        cuda_post_cflags=shlex.split(var.get("cuda_post_cflags", "")),
        ldflags=shlex.split(var.get("ldflags", "")),
        main_cpp=(where / "main.cpp").read_text(),
        cuda_cu=(where / "cuda.cu").read_text(),
    )


@functools.lru_cache(maxsize=8)
def _tool_version(cmd: tuple[str, ...]) -> str:
    try:
        return subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def toolchain_id(plan: Plan) -> tuple[str, str]:
    """The C++ compiler's and nvcc's own version text (asked once per process), for cache keys."""
    return _tool_version(tuple(plan.cxx)), _tool_version(tuple(plan.nvcc))
