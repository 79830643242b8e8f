"""On-disk compile cache keyed by everything that changes the output: target, source,
problem (for traced signatures), arch, options and toolchain versions.

Writes go to a temporary file then ``os.replace``, so two workers compiling the same
source at once both leave a whole entry, never a torn one.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import tempfile
from pathlib import Path


def _code_digest() -> str:
    """Our own code that shapes a compile report: a change to it invalidates old entries."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(
        [*root.glob("targets/**/*.py"), *root.glob("runtime/*.py"), *root.glob("judge/*.py"), *root.glob("core/*.py")]
    ):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def code_versions() -> dict[str, str]:
    """Our code's digest and the torch and kforge-mcp versions: what a cached answer depends on."""
    out = {"kforge-code": _code_digest()}
    for dist in ("torch", "kforge-mcp"):  # a target adds its own toolchains (Target.cache_versions)
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "-"
    return out


class CompileCache:
    def __init__(self, root: Path, what: str = "the compile cache"):
        self.root, self.what = root, what  # what: the name a write error gives it

    def key(self, **parts) -> str:
        blob = json.dumps({**parts, "versions": code_versions()}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        try:
            return json.loads(self._path(key).read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, value: dict) -> None:
        path = self._path(key)
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "w") as f:
                json.dump(value, f)
            os.replace(tmp, path)
        except OSError as e:  # a read-only or full home: say which path and why, leave no torn file
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            from kforge_mcp.core.home import write_error

            raise write_error(self.what, path.parent, e) from None
