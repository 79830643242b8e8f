"""What the sandbox refused, in words, for an error raised in a sandboxed worker: a write outside the
folders Landlock allows, a connection or look-up the network namespace or Landlock's TCP rule blocks. The
worker installs ``audit`` as an audit hook, so a refused connection is named by its address."""

from __future__ import annotations

import errno
import os
import socket
from typing import Any

from kforge_mcp.runtime.landlock import writable_dirs
from kforge_mcp.runtime.sandbox import STATUS

# errors a blocked connection gives: Landlock's TCP rule (EACCES), the namespace's down loopback (ENETUNREACH)
NETWORK_ERRNOS = (errno.EACCES, errno.EPERM, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL)
WRITE_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)
LOOK_UPS = ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr")
_last_socket_call: list[tuple[str, tuple[Any, ...]]] = []  # (audit event, its arguments) of the job's last socket call


def audit(event: str, args: tuple) -> None:
    """The worker's audit hook (sys.addaudithook): remembers the last socket call."""
    if event.startswith("socket."):
        _last_socket_call[:] = [(event, args)]


def forget_socket_calls() -> None:
    """A job starts: a refusal it meets is never explained by an earlier job's socket call."""
    _last_socket_call.clear()


def _on(protection: str) -> bool:
    return STATUS.get(protection, "").startswith("on")


def _may_write(path: str) -> bool:
    real = os.path.realpath(path)
    return any(real == d or real.startswith(d.rstrip("/") + "/") for d in map(os.path.realpath, _write_dirs()))


def _write_dirs() -> list[str]:
    return writable_dirs() + (["/dev/shm"] if os.path.isdir("/dev/shm") else [])


def _refused(e: OSError) -> str | None:
    """The operation the sandbox refused, in words, when ``e`` is its doing."""
    network = _on("network") or (_on("landlock") and "tcp" in STATUS["landlock"])
    event, args = _last_socket_call[0] if _last_socket_call else ("", ())
    if isinstance(e, (socket.gaierror, socket.herror)):
        if not network:
            return None
        host = args[0] if event in LOOK_UPS else None  # (socket.connect is audited after its look-up)
        return f"looking up the host {host}" if isinstance(host, str) else "a host-name look-up"
    if e.filename is not None:
        path = os.fsdecode(e.filename)
        if not _on("landlock") or e.errno not in WRITE_ERRNOS or _may_write(path):
            return None  # Landlock lets everything be read: a refusal it makes is a write outside the dirs
        if os.path.exists(path) and not os.access(path, os.R_OK):
            return None  # the file's own permissions refuse even a read
        return f"writing to {path}"
    if not network or e.errno not in NETWORK_ERRNOS or not event:
        return None
    if event == "socket.connect":
        return f"a connection to {_address(args[1])}"
    if event == "socket.bind":
        return f"listening on {_address(args[1])}"
    return f"the network call {event}"


def _address(address) -> str:
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) and len(address) >= 2 else str(address)


def refused(exc: BaseException) -> str | None:
    """What the sandbox refused ('writing to ~/x', 'a connection to 10.0.0.1:80'), when ``exc``, or an error it
    was raised from, is its refusal (Landlock's write rule, the network namespace, Landlock's TCP rule); None
    otherwise. Follows explicit causes, and the context an error raised ``from None`` hides (our own wrappers)."""
    e: BaseException | None = exc
    for _ in range(16):
        if e is None:
            return None
        if isinstance(e, OSError) and (what := _refused(e)):
            return what
        e = e.__cause__ or (e.__context__ if e.__suppress_context__ else None)
    return None


def allowed() -> str:
    """What a sandboxed worker may do, in one clause: its writable folders, grouped by parent."""
    groups: dict[str, list[str]] = {}
    for d in _write_dirs():
        parent, name = os.path.split(d.rstrip("/"))
        groups.setdefault(parent, []).append(name)
    dirs = [f"{p}/{names[0]}" if len(names) == 1 else f"{p}/{{{','.join(names)}}}" for p, names in groups.items()]
    return f"candidates and problems may write only under {', '.join(dirs)} and make no network connections"


def explained(message: str, exc: BaseException, diagnostics: list) -> str:
    """``message``, and the diagnostic at the submitted code's line, with what the sandbox refused when it did."""
    what = refused(exc)
    if what is None:
        return message
    if diagnostics:
        diagnostics[0].message += f" (the sandbox refused {what})"
    return f"{message}; the sandbox refused {what}: {allowed()}"
