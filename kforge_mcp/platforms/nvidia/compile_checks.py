"""What NVIDIA's limits say of a compile, without a GPU: arch names (a user's, a device's), and the shared
memory one block of an arch may use (a kernel past it fails to launch)."""

from __future__ import annotations

import re

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.schemas import CompileReport, Diagnostic

DEFAULT_ARCH = "sm_90a"


def normalize_arch(arch: str | None) -> str:
    """'sm_90a', '90a', '9.0', 'sm_100a' -> 'sm_90a' style, as nvcc's -arch wants it."""
    text = (arch or DEFAULT_ARCH).strip().lower()
    m = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3})([af]?)", text) or re.fullmatch(r"(\d+)\.(\d)([af]?)", text)
    if not m:
        raise InputError(f"arch '{arch}' is not an NVIDIA arch such as sm_80, sm_90a or sm_100a")
    return f"sm_{m.group(1)}{m.group(2)}" if "." not in text else f"sm_{m.group(1)}{m.group(2)}{m.group(3)}"


def sm_arch(major: int, minor: int) -> str:
    """The arch a probe reports for a compute capability: sm_90a on Hopper and later (their wgmma and TMA
    need the arch-specific target), sm_86 before."""
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


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


def shared_memory_diagnostics(report: CompileReport) -> list[Diagnostic]:
    """Kernels of a CompileReport that ask for more shared memory than a block of its arch may have:
    an error naming the kernel and the bytes, or a warning for autotune configs the autotuner drops
    while another config of the same kernel fits."""
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
