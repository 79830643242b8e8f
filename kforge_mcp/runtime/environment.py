"""The environment a worker starts with: an allowlist, so API keys, tokens and server
settings never reach candidate code, plus what its lane needs."""

from __future__ import annotations

import os
from pathlib import Path

ALLOWED = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME", "LD_LIBRARY_PATH", "CC", "CXX"}
ALLOWED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "TRITON_", "TORCH_", "TORCHINDUCTOR_", "ZE_", "ONEAPI_", "SYCL_", "OMP_")
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")


def worker_environment(lane: str, home: Path, tmp: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    base = dict(os.environ if base is None else base)
    env = {
        k: v
        for k, v in base.items()
        if (k in ALLOWED or k.startswith(ALLOWED_PREFIXES)) and not any(m in k.upper() for m in SECRET_MARKERS)
    }
    package_root = str(Path(__file__).resolve().parents[2])
    # the worker imports kforge_mcp (and what the server imports) even when it is not installed
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, base.get("PYTHONPATH", "")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["KFORGE_WORKER_LANE"] = lane
    env["KFORGE_WORKER_TMP"] = str(tmp)
    env.setdefault("TRITON_CACHE_DIR", str(home / "cache" / "triton"))
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(home / "cache" / "inductor"))
    env.setdefault("TORCH_EXTENSIONS_DIR", str(home / "cache" / "torch_extensions"))  # cuda target builds
    env["KFORGE_BASELINES_DIR"] = str(home / "cache" / "baselines")  # baseline timings kept across restarts
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton's own default; set so it stops warning
    # an autotuned kernel's choice kept on disk: a new worker, or the profiler's own process, does not tune again
    env.setdefault("TRITON_CACHE_AUTOTUNING", "1")
    # sandbox and CUDA build settings reach the worker; with the sandbox on, temp files and tool caches go to
    # dirs the worker may write (Landlock leaves it only those: see landlock.py)
    env.update({k: v for k, v in base.items() if k.startswith(("KFORGE_SANDBOX", "KFORGE_CUDA_"))})
    for packages in ("KFORGE_TARGETS", "KFORGE_PLATFORMS"):  # packages outside kforge_mcp: the worker's registries
        if base.get(packages):  # load them too
            env[packages] = base[packages]
    from kforge_mcp.runtime.sandbox import enabled

    if enabled("landlock", base):
        env["TMPDIR"] = str(tmp)
        env.setdefault("TRITON_HOME", str(home / "cache" / "triton_home"))
        env.setdefault("CUDA_CACHE_PATH", str(home / "cache" / "cuda_jit"))
        env.setdefault("XDG_CACHE_HOME", str(home / "cache" / "xdg"))
    env.pop("TRITON_INTERPRET", None)
    if lane.split(".")[0] == "cpu":  # "cpu", or "cpu.1", ... when the executor runs several
        env["TRITON_INTERPRET"] = "1"  # no GPU on this lane: kernels run through the interpreter
    return env
