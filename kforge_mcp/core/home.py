"""The engine home (<KFORGE_HOME>, default ~/.kforge) must be writable: the run store and the
compile cache live there. A read-only or full home is reported as a KforgeError naming the path
and the cause, at startup (``check_home``) and when a later write fails (``write_error``,
``StoreConnection`` for the SQLite run store), so a tool call fails with a readable message and
the server keeps serving."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from kforge_mcp.core.errors import KforgeError

PROBE_BYTES = 64 * 1024  # the probe file at startup: a home that cannot take this is full
HINT = "set KFORGE_HOME (or --home) to a writable directory with free space"


def free_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _cause(err: OSError) -> str:
    name = errno.errorcode.get(err.errno or 0, "")
    if err.errno == errno.ENOSPC:
        return f"the disk is full ({name})"
    if err.errno == errno.EROFS:
        return f"the filesystem is read-only ({name})"
    if err.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied ({name})"
    if err.errno == errno.EFBIG:
        return f"file size limit exceeded ({name})"
    return f"{err.strerror or err} ({name})" if name else str(err)


def write_error(what: str, path: Path | str, err: OSError) -> KforgeError:
    """'<what> at <path> cannot be written: <cause>; <hint>'."""
    free = free_bytes(Path(path).parent if not Path(path).is_dir() else Path(path))
    room = f"; {free / 2**20:.1f} MiB free there" if free is not None else ""
    return KforgeError(f"{what} at {path} cannot be written: {_cause(err)}{room}; {HINT}")


def check_home(home: Path) -> None:
    """Create the home if needed and prove it takes a small file; raise a KforgeError that says
    which path and why if not (read-only, full, not a directory, no permission)."""
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error("the engine home", home, e) from None
    if not home.is_dir():
        raise KforgeError(f"the engine home {home} is not a directory; {HINT}")
    probe = home / f".kforge-write-probe-{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"\0" * PROBE_BYTES)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise write_error("the engine home", home, e) from None
    finally:
        try:
            probe.unlink()
        except OSError:
            pass


# SQLite's words for a failed write, and what they mean for the reader
_SQLITE_CAUSES = (
    ("readonly", "the database or its directory is read-only"),
    ("disk is full", "the disk is full"),
    ("disk i/o error", "a disk I/O error (often a full or read-only filesystem)"),
    ("unable to open database", "the database file cannot be opened (read-only or missing directory?)"),
)


FULL_BELOW = 2**20  # SQLite often says only "disk I/O error": under this much free space, call it full


def _filesystem_state(path: Path) -> str | None:
    """'read-only' or 'full' when the filesystem holding ``path`` is one, else None."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return "read-only"
    if st.f_bavail * st.f_frsize < FULL_BELOW:
        return "full"
    return None


def store_error(path: Path, err: sqlite3.OperationalError) -> KforgeError | None:
    """A KforgeError for a write failure of the run store, or None for other SQLite errors."""
    text = str(err).lower()
    for needle, cause in _SQLITE_CAUSES:
        if needle in text:
            state = _filesystem_state(path.parent)
            if state == "read-only":
                cause = "the filesystem is read-only"
            elif state == "full":
                cause = "the disk is full"
            free = free_bytes(path.parent)
            room = f"; {free / 2**20:.1f} MiB free there" if free is not None else ""
            return KforgeError(f"the run store at {path} cannot be written: {cause} (sqlite: {err}){room}; {HINT}")
    return None


class StoreConnection(sqlite3.Connection):
    """sqlite3.Connection that turns a failed write into a KforgeError naming the file and cause."""

    kforge_path: str  # set by connect_store

    def _translate(self, err: sqlite3.OperationalError):
        path = Path(getattr(self, "kforge_path", "runs.db"))
        return store_error(path, err) or err

    def execute(self, *args, **kwargs):
        try:
            return super().execute(*args, **kwargs)
        except sqlite3.OperationalError as e:
            raise self._translate(e) from None

    def executescript(self, *args, **kwargs):
        try:
            return super().executescript(*args, **kwargs)
        except sqlite3.OperationalError as e:
            raise self._translate(e) from None

    def commit(self):
        try:
            return super().commit()
        except sqlite3.OperationalError as e:
            raise self._translate(e) from None

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        except sqlite3.OperationalError as e:
            raise self._translate(e) from None


def connect_store(path: Path, timeout: float = 30.0) -> sqlite3.Connection:
    try:
        db = sqlite3.connect(path, timeout=timeout, factory=StoreConnection)
    except sqlite3.OperationalError as e:
        raise store_error(path, e) or e from None
    db.kforge_path = str(path)
    return db
