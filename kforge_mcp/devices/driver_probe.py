"""What ``device.discover()`` finds, without importing torch (seconds on a cold machine, most of a
fresh home's first ``list_targets``): torch's build read from its version.py as text, NVIDIA GPUs asked of
the CUDA driver through ctypes (the library torch's own device count goes through).

It answers only where that answer is exactly torch's: a CPU or CUDA build of torch on Linux or Windows,
with a driver that runs the build's CUDA version. Elsewhere (an XPU or ROCm build, macOS and its MPS, a
driver older than the build) it answers None, and the probe imports torch and asks it.
"""

from __future__ import annotations

import ast
import ctypes
import importlib.util
import platform
import sys
from pathlib import Path

from kforge_mcp.platforms.nvidia.compile_checks import sm_arch

CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
DRIVER_LIBRARIES = ("libcuda.so.1", "libcuda.so", "nvcuda.dll")


def torch_build() -> dict | None:
    """torch/version.py's constants (``__version__``, ``cuda``, ``hip``, ``xpu``...), or None without torch.
    Importing ``torch.version`` would import all of torch first."""
    spec = importlib.util.find_spec("torch")  # a top-level package: found, not imported
    if spec is None or not spec.origin:
        return None
    try:
        tree = ast.parse((Path(spec.origin).parent / "version.py").read_text())
    except (OSError, SyntaxError):
        return None
    build = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            build[target.id] = value.value
    return build if "__version__" in build else None


def _driver() -> ctypes.CDLL | None:
    for name in DRIVER_LIBRARIES:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def cuda_devices(cuda_version: str) -> list[tuple[str, int, int]] | None:
    """(name, major, minor) of each GPU the driver shows (CUDA_VISIBLE_DEVICES applies, as for torch); []
    where torch would find none (no driver, none usable); None where the driver is older than the CUDA
    version torch was built for (torch decides then)."""
    lib = _driver()
    if lib is None or lib.cuInit(0) != 0:
        return []  # no driver, or no device it can use: torch.cuda.is_available() is False
    version = ctypes.c_int()
    if lib.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    if version.value // 1000 < int(cuda_version.split(".")[0]):  # minor-version compatibility within a major
        return None
    count = ctypes.c_int()
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return []
    found = []
    for i in range(count.value):
        device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        name = ctypes.create_string_buffer(256)
        ok = lib.cuDeviceGet(ctypes.byref(device), i) == 0
        ok = ok and lib.cuDeviceGetName(name, len(name), device) == 0
        ok = (
            ok
            and lib.cuDeviceGetAttribute(ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) == 0
        )
        ok = (
            ok
            and lib.cuDeviceGetAttribute(ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device) == 0
        )
        if not ok:
            return None
        found.append((name.value.decode(errors="replace"), major.value, minor.value))
    return found


def discover_without_torch() -> tuple[list[str], dict[str, str], dict[str, str]] | None:
    """(devices, a name for each, build facts) as ``device.discover()`` and torch would give them, or None
    where only torch can say. Build facts: ``torch`` (its version), ``torch cuda``, ``arch`` of the first GPU."""
    build = torch_build()
    if build is None or sys.platform == "darwin" or build.get("xpu") or build.get("hip"):
        return None
    facts = {"torch": str(build["__version__"])}
    devices, names = [], {}
    if build.get("cuda"):
        facts["torch cuda"] = str(build["cuda"])
        gpus = cuda_devices(str(build["cuda"]))
        if gpus is None:
            return None
        for i, (name, major, minor) in enumerate(gpus):
            devices.append(f"cuda:{i}")
            names[f"cuda:{i}"] = f"{name} ({sm_arch(major, minor)})"
        if gpus:
            facts["arch"] = sm_arch(*gpus[0][1:])
    devices.append("cpu")
    names["cpu"] = platform.processor() or platform.machine()
    return devices, names, facts
