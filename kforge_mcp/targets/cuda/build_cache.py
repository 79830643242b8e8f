"""What the split CUDA build keeps between builds, under the extension cache: compiled objects by
content and the units' precompiled headers. Every file is written whole (temp file, then
``os.replace``) with a checksum beside it, so two servers sharing a home never read each other's
half-written files, and a corrupt entry is rebuilt, never trusted.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path


def digest(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_whole(path: Path, data: bytes) -> None:
    """Write through a temp file and ``os.replace``: two servers sharing a home each write whole
    files, and the last one wins."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def seal(path: Path) -> None:
    """A checksum beside ``path``, written after it: a file without a matching one is not trusted."""
    write_whole(path.with_name(path.name + ".sha256"), file_sha(path).encode())


def sealed(path: Path) -> bool:
    try:
        return path.with_name(path.name + ".sha256").read_text().strip() == file_sha(path)
    except OSError:
        return False


class ObjectCache:
    """Objects by key, each sealed with its checksum, which is checked on every reuse."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def get(self, key: str) -> Path | None:
        obj = self.root / f"{key}.o"
        if sealed(obj):
            return obj
        with contextlib.suppress(OSError):  # corrupt or half-written by a crashed build: never trusted
            obj.unlink()
            obj.with_name(obj.name + ".sha256").unlink()
        return None

    def put(self, key: str, built: Path) -> Path:
        obj = self.root / f"{key}.o"
        write_whole(obj, built.read_bytes())
        seal(obj)
        return obj


class Pch:
    """A unit's prelude precompiled once per toolchain and flags; built in the background."""

    def __init__(self, root: Path, cxx: list[str], cflags: list[str], versions: tuple, name: str, prelude: str):
        self.dir = root / f"pch-{name}-{digest(cxx, cflags, versions, prelude)}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.header = self.dir / f"kforge_{name}.h"
        if not self.header.exists():
            write_whole(self.header, prelude.encode())
        self.gch = self.dir / f"kforge_{name}.h.gch"
        self.ok = self.dir / f"kforge_{name}.h.gch.ok"
        # cflags without the module name: one header serves every extension (a -D the header does
        # not use leaves it valid)
        self.cmd = [*cxx, *cflags, "-x", "c++-header", str(self.header)]

    def flags(self) -> list[str]:
        """What a unit compiles with: the precompiled header when it is ready, else its text."""
        return ["-Winvalid-pch", "-include", str(self.header)]

    @property
    def ready(self) -> bool:
        return self.ok.exists() and self.gch.exists()

    def start_build(self) -> None:
        """Start building the header in a detached process, unless one is built or building."""
        marker = self.dir / "building"
        with contextlib.suppress(OSError, ValueError):
            if time.time() - marker.stat().st_mtime > 900 or not _alive(int(marker.read_text() or 0)):
                marker.unlink()  # a build that died (killed with the worker that started it) or hangs
        if self.ready:
            return
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
        tmp = self.dir / f".gch.{os.getpid()}"
        script = (
            f"{shlex.join([*self.cmd, '-o', str(tmp)])} && mv -f {shlex.quote(str(tmp))} {shlex.quote(str(self.gch))}"
            f" && touch {shlex.quote(str(self.ok))}; rm -f {shlex.quote(str(marker))} {shlex.quote(str(tmp))}"
        )
        nice = ["nice", "-n", "10"] if shutil.which("nice") else []  # behind the builds a verify waits for
        proc = start_detached([*nice, "sh", "-c", script])
        with contextlib.suppress(OSError):
            marker.write_text(str(proc.pid))


def start_logged(cmd: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    """A compile or link in the background, its output in ``log``: a file, not a pipe, as the build polls
    its processes and one's errors can be long."""
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)


def start_detached(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """A background process that outlives the worker that starts it, its output discarded."""
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (0, not yet written by the build's starter: taken as running)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# a call whose line the compiler fills in from the line markers: c10's SourceLocation::current() (the only
# function with a __builtin_LINE() default in torch's headers; its logging macros name it), std::source_location;
# where one is, the markers are part of what the object is made of
_LINE_FROM_MARKERS = ("SourceLocation::current", "source_location::current", "__builtin_LINE")
_MARKER = re.compile(r"^#\s*(?:line\s+)?\d+")


def preprocessed_text(compile_cmd: list[str], cwd: Path) -> str | None:
    """What a host unit compiled through a precompiled header is made of: its text preprocessed against that
    header (``-fpch-preprocess``: the header's macros expanded, its text left out, in tens of milliseconds),
    without the layout a kernel edit changes in the host unit (blank lines where the kernels were, the line
    markers that count them). __LINE__ is expanded in it, so a TORCH_CHECK below the kernels still changes it.
    None where the unit cannot be preprocessed so (then its source text keys it)."""
    cmd = [a for a in compile_cmd if a != "-c"]
    try:
        out = cmd.index("-o")
        del cmd[out : out + 2]
        done = subprocess.run([*cmd, "-fpch-preprocess", "-E"], cwd=cwd, capture_output=True, text=True, timeout=60)
    except (ValueError, OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0 or "#pragma GCC pch_preprocess" not in done.stdout:
        return None
    if any(call in done.stdout for call in _LINE_FROM_MARKERS):
        return done.stdout
    lines = (ln.strip() for ln in done.stdout.splitlines() if not _MARKER.match(ln))
    return "\n".join(ln for ln in lines if ln)
