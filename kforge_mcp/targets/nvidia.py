"""NVIDIA tooling every NVIDIA target shares: finding the CUDA tools (nvcc, ptxas, cuobjdump), reading
a cubin's resources, and the arch names. No target imports another; they import this."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from kforge_mcp.core.errors import InputError

DEFAULT_ARCH = "sm_90a"
NEEDS_GPU = "needs an NVIDIA GPU to run; compile works here"
BUNDLED_BY_TRITON = ("cuobjdump", "nvdisasm", "ptxas")


def _triton_bundled(name: str) -> str | None:
    spec = importlib.util.find_spec("triton") if name in BUNDLED_BY_TRITON else None
    if spec and spec.origin:
        bundled = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / name
        if bundled.exists():
            return str(bundled)
    return None


@functools.cache
def find_tool(name: str, prefer_triton_bundle: bool = False) -> str | None:
    """A CUDA tool: the toolkit's (CUDA_HOME, CUDA_PATH, /usr/local/cuda), then PATH, then the copy
    Triton bundles. Triton asks for its bundle first, so its cubins meet the tools they came with."""
    if prefer_triton_bundle and _triton_bundled(name):
        return _triton_bundled(name)
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if base and Path(base, "bin", name).exists():
            return str(Path(base, "bin", name))
    return shutil.which(name) or _triton_bundled(name)


def cubin_resources(cubin: bytes) -> dict[str, dict[str, int]]:
    """Parse ``cuobjdump --dump-resource-usage``: REG, STACK, SHARED, LOCAL per function."""
    tool = find_tool("cuobjdump", prefer_triton_bundle=True)
    if tool is None:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True, timeout=60).stdout
    result: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in out.splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            current = result.setdefault(m.group(1), {})
        elif current is not None:
            current.update({k: int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", line)})
    return result


def normalize_arch(arch: str | None) -> str:
    """'sm_90a', '90a', '9.0', 'sm_100a' -> 'sm_90a' style, as nvcc's -arch wants it."""
    text = (arch or DEFAULT_ARCH).strip().lower()
    m = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3})([af]?)", text) or re.fullmatch(r"(\d+)\.(\d)([af]?)", text)
    if not m:
        raise InputError(f"arch '{arch}' is not an NVIDIA arch such as sm_80, sm_90a or sm_100a")
    return f"sm_{m.group(1)}{m.group(2)}" if "." not in text else f"sm_{m.group(1)}{m.group(2)}{m.group(3)}"


@functools.cache
def tool_version(name: str, prefer_triton_bundle: bool = False) -> str | None:
    """'12.9.86' from ``<tool> --version`` of the CUDA tool a compile uses (nvcc, ptxas; Triton's bundle
    for Triton)."""
    tool = find_tool(name, prefer_triton_bundle)
    if tool is None:
        return None
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"\bV(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else None


# Shared memory one block may use, with the opt-in for dynamic shared memory
# (cudaDevAttrMaxSharedMemoryPerBlockOptin; CUDA C++ Programming Guide, "Technical Specifications per
# Compute Capability"). A launch asking for more fails with "out of resources" on the GPU.
MAX_SHARED_PER_BLOCK = {
    70: 98_304,  # 96 KB
    72: 98_304,
    75: 65_536,  # 64 KB
    80: 166_912,  # 163 KB
    86: 101_376,  # 99 KB
    87: 166_912,
    89: 101_376,
    90: 232_448,  # 227 KB
    100: 232_448,
    103: 232_448,
    120: 101_376,
    121: 101_376,
}


def shared_memory_limit(arch: str | None) -> int | None:
    """Bytes of shared memory a block of ``arch`` may use; None for an arch not in the table."""
    m = re.fullmatch(r"sm_(\d{2,3})[af]?", normalize_arch(arch)) if arch else None
    return MAX_SHARED_PER_BLOCK.get(int(m.group(1))) if m else None


def shared_memory_diagnostics(report) -> list:
    """Kernels of a CompileReport that ask for more shared memory than a block of its arch may have:
    an error naming the kernel and the bytes, or a warning for autotune configs the autotuner drops
    while another config of the same kernel fits."""
    from kforge_mcp.core.schemas import Diagnostic

    try:
        limit = shared_memory_limit(report.arch)
    except InputError:
        return []
    if limit is None:
        return []
    fits = {k.name for k in report.kernels if k.shared_bytes is not None and k.shared_bytes <= limit}
    diags = []
    for k in report.kernels:
        if k.shared_bytes is None or k.shared_bytes <= limit:
            continue
        name = f"{k.name} [{k.config}]" if k.config else k.name
        dropped = k.config is not None and k.name in fits
        diags.append(
            Diagnostic(
                severity="warning" if dropped else "error",
                kernel=k.name,
                message=f"kernel {name} needs {k.shared_bytes:,} bytes of shared memory; a block on {report.arch} "
                f"may use at most {limit:,} bytes ({limit // 1024} KB): "
                + (
                    "the autotuner drops this config and runs the others"
                    if dropped
                    else "the launch fails on the GPU; use fewer stages or smaller tiles"
                ),
            )
        )
    return diags
