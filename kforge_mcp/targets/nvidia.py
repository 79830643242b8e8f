"""NVIDIA tooling every NVIDIA target shares: finding the CUDA tools (nvcc, ptxas, cuobjdump) and reading
a cubin's resources (arch names are the NVIDIA platform's: platforms/nvidia/compile_checks.py). No target
imports another; they import this."""

from __future__ import annotations

import functools
import importlib.util
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from kforge_mcp.core.process_env import variable

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
    for base in (variable("CUDA_HOME"), variable("CUDA_PATH"), "/usr/local/cuda"):
        if base and Path(base, "bin", name).exists():
            return str(Path(base, "bin", name))
    return shutil.which(name) or _triton_bundled(name)


_SERIALIZED = re.compile(
    r"\((C751\d)\) Potential Performance Loss: wgmma\.mma_async instructions are serialized due to (.+?)(?: in the "
    r"function '[^']*')?\.?$",
    re.M,
)


# The exit block libdevice's logf, log1pf, log2f and log10f leave in PTX where the compiler inlined them (each copy
# one label): the ~25-40 instruction polynomial the hardware's lg2.approx replaces (bench/epilogue_math.py).
_POLYNOMIAL_LOG = re.compile(r"%__nv_log(?:1p|2|10)?f\.exit\d*$", re.M)


def polynomial_logs(ptx: str) -> int:
    """How many copies of libdevice's polynomial log the PTX inlines (tl.log, tl.log2, libdevice.log1p, logf)."""
    return len(_POLYNOMIAL_LOG.findall(ptx))


class PtxasUnavailable(RuntimeError):
    """ptxas is not at hand, or could not run here (the reason is the message)."""


def wgmma_serialized(ptx: str, arch: str = "sm_90a") -> str:
    """Why ptxas serializes this PTX's wgmma.mma_async (its C7514/C7515 performance warnings: each MMA then waits
    for the one before, so none overlaps another or the loads); '' where ptxas serializes none of them or the PTX
    has none. Asks Triton's bundled ptxas, then the toolkit's where the bundle is older than the PTX (Triton may
    build with the newer one). Raises PtxasUnavailable where neither can tell."""
    if "wgmma.mma_async" not in ptx:
        return ""
    tools = list(dict.fromkeys(t for t in (_triton_bundled("ptxas"), find_tool("ptxas")) if t))
    if not tools:
        raise PtxasUnavailable("no ptxas found")
    why = ""
    for tool in tools:
        try:
            with tempfile.TemporaryDirectory(dir=variable("TMPDIR") or None) as d:
                src = Path(d) / "k.ptx"
                src.write_text(ptx)
                run = subprocess.run(
                    [tool, f"-arch={arch}", "-v", str(src), "-o", str(Path(d) / "k.cubin")],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
        except (OSError, subprocess.SubprocessError) as e:
            why = f"{type(e).__name__}: {e}"
            continue
        if run.returncode == 0:
            found = _SERIALIZED.search(run.stdout + run.stderr)
            return f"{found.group(1)}: {' '.join(found.group(2).split())}" if found else ""
        why = f"ptxas exited {run.returncode}: {' '.join(run.stderr.split())[:200]}"
    raise PtxasUnavailable(why)


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
