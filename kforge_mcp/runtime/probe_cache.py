"""The last target probe of this same setup, kept under the home, so a new server answers
``list_targets`` at once instead of after a worker start (~3-6 s) and refreshes it in the background.

The fingerprint is what a probe's answer depends on and can be read without importing torch: the
interpreter, the installed versions of torch, triton and the kernel DSLs, the tools on PATH (path and
modification time), the GPU device nodes, the CUDA/Triton/KFORGE environment (no secrets), and the
target and engine code (the compile cache's digest). A different fingerprint, or a file that does not parse, is a miss.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from kforge_mcp.core.process_env import variables
from kforge_mcp.core.schemas import TargetsReport
from kforge_mcp.runtime.cache import code_versions
from kforge_mcp.runtime.environment import SECRET_MARKERS

DISTS = ("triton", "pytorch-triton-xpu", "nvidia-cutlass", "nvidia-cutlass-dsl")  # torch: in code_versions()
TOOLS = ("nvcc", "ncu", "nsys", "xcrun", "unitrace", "compute-sanitizer")
ENV_PREFIXES = ("CUDA_", "TRITON_", "TORCH_", "ZE_", "ONEAPI_", "KFORGE_", "NVIDIA_")


def _stat(path: str | None) -> list:
    if not path:
        return [None]
    try:
        st = os.stat(path)
        return [path, st.st_mtime_ns, st.st_size]
    except OSError:
        return [path]


def fingerprint() -> str:
    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    env = {
        k: v
        for k, v in variables().items()
        if k.startswith(ENV_PREFIXES) and not any(m in k.upper() for m in SECRET_MARKERS)
    }
    parts = {
        "python": [sys.executable, sys.version],
        "dists": {d: version(d) for d in DISTS},
        "tools": {t: _stat(shutil.which(t)) for t in TOOLS},
        "devices": sorted(glob.glob("/dev/nvidia[0-9]*") + glob.glob("/dev/dri/renderD*")),
        "env": sorted(env.items()),
        "path": variables().get("PATH", ""),
        "code": code_versions(),  # our target and engine code, torch and kforge-mcp
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class ProbeCache:
    def __init__(self, home: Path):
        self.path = home / "cache" / "probe.json"

    def load(self) -> TargetsReport | None:
        try:
            saved = json.loads(self.path.read_text())
            if saved.get("fingerprint") != fingerprint():
                return None
            return TargetsReport.model_validate(saved["report"])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent, half-written or from another version: probe again

    def save(self, report: TargetsReport) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".probe.{os.getpid()}.json")
            tmp.write_text(json.dumps({"fingerprint": fingerprint(), "report": report.model_dump()}))
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only home still serves; the next start probes again


class KnownTargets:
    """What ``list_targets`` answers: the last probe of this setup at once (then a fresh probe behind
    it), or a probe now when there is none or ``refresh`` asks for one. ``kept``: whether a probe is kept
    under the home for the next start; not for a cluster, whose nodes come and go unseen by the
    fingerprint (a kept answer of this machine would list none of them)."""

    def __init__(self, home: Path, probe: Callable[[Callable[[str], None] | None], TargetsReport], kept: bool = True):
        self.cache, self.probe, self.kept = ProbeCache(home), probe, kept
        self.report: TargetsReport | None = None
        self.lock = threading.Lock()

    def get(self, refresh: bool = False, on_progress: Callable[[str], None] | None = None) -> TargetsReport:
        with self.lock:
            if self.report is None and not refresh and self.kept:
                self.report = self.cache.load()
                if self.report is not None:
                    threading.Thread(target=self._refresh_quietly, daemon=True, name="kforge-probe").start()
            if self.report is None or refresh:
                self.report = self.probe(on_progress)
                if self.kept:
                    self.cache.save(self.report)
            return self.report

    def _refresh_quietly(self) -> None:
        with contextlib.suppress(Exception):  # the cached answer stands; the next call that needs a probe says why
            report = self.probe(None)
            self.report = report
            self.cache.save(report)
