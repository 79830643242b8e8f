"""Landlock for a worker: after it starts, the filesystem is read-only except for the directories it
must write (its temp dir and the tool caches), and, from ABI 6, it may not signal processes outside
its own tree. The worker applies it through sandbox.apply."""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from collections.abc import Mapping

from kforge_mcp.core.process_env import variables

SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH, LANDLOCK_RULE_NET_PORT = 1, 2
PR_SET_NO_NEW_PRIVS = 38
O_PATH = getattr(os, "O_PATH", 0o10000000)

FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK, FS_MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
FS_REFER, FS_TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_SIGNAL = 1 << 1  # ABI 6

READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE
# device files a GPU stack opens read-write (created ones under /dev/shm are covered by the dir rule)
DEVICE_GLOBS = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/nvidia*",
    "/dev/nvidia-caps/*",
    "/dev/dri/*",
    "/dev/kfd",
    "/dev/accel/*",
)


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(
        SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION)
    )
    return int(abi) if abi > 0 else 0


def writable_dirs(env: Mapping[str, str] | None = None) -> list[str]:
    """Where a sandboxed worker may write: its temp dir and the caches compiling needs."""
    env = variables() if env is None else env
    keys = (
        "KFORGE_WORKER_TMP",
        "TMPDIR",
        "TRITON_CACHE_DIR",
        "TRITON_HOME",
        "TORCHINDUCTOR_CACHE_DIR",
        "TORCH_EXTENSIONS_DIR",
        "KFORGE_BASELINES_DIR",
        "CUDA_CACHE_PATH",
        "XDG_CACHE_HOME",
    )
    return list(dict.fromkeys(env[k] for k in keys if env.get(k)))


def _write_rights(abi: int) -> int:
    """The filesystem rights that write, as far as the kernel's Landlock ABI knows them."""
    write = (
        FS_WRITE_FILE
        | FS_REMOVE_DIR
        | FS_REMOVE_FILE
        | FS_MAKE_CHAR
        | FS_MAKE_DIR
        | FS_MAKE_REG
        | FS_MAKE_SOCK
        | FS_MAKE_FIFO
        | FS_MAKE_BLOCK
        | FS_MAKE_SYM
    )
    if abi >= 2:
        write |= FS_REFER
    if abi >= 3:
        write |= FS_TRUNCATE
    return write


def _landlock(write_dirs: list[str], owned: set[str | None]) -> str:
    """Enter Landlock: read everywhere, write only to ``write_dirs`` (made first unless ``owned``: the pool's)."""
    abi = landlock_abi()
    if abi < 1:
        return "off (Landlock is not available in this kernel)"
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    write = _write_rights(abi)
    handled = READ | write
    attr = _RulesetAttr(
        handled_access_fs=handled,
        handled_access_net=(NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0,
        scoped=SCOPE_SIGNAL if abi >= 6 else 0,
    )
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"off (landlock_create_ruleset: {os.strerror(ctypes.get_errno())})"
    ruleset = int(ruleset)
    try:

        def allow(path: str, access: int) -> bool:
            try:
                fd = os.open(path, O_PATH | os.O_CLOEXEC)
            except OSError:
                return False
            try:
                if not os.path.isdir(path):
                    access &= FILE_RIGHTS
                rule = _PathBeneathAttr(allowed_access=access, parent_fd=fd)
                return (
                    libc.syscall(
                        SYS_LANDLOCK_ADD_RULE,
                        ctypes.c_int(ruleset),
                        ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                        ctypes.byref(rule),
                        ctypes.c_uint32(0),
                    )
                    == 0
                )
            finally:
                os.close(fd)

        if not allow("/", READ):
            return f"off (landlock_add_rule: {os.strerror(ctypes.get_errno())})"
        allowed = []
        # the pool makes and removes the worker's temp dir: gone means the pool shut down while this worker
        # started, and making it again would leave it behind
        for d in write_dirs:
            try:
                if d not in owned:
                    os.makedirs(d, exist_ok=True)
            except OSError:
                pass
            if allow(d, READ | write):
                allowed.append(d)
        for pattern in DEVICE_GLOBS:
            for dev in glob.glob(pattern):
                allow(dev, READ | FS_WRITE_FILE | FS_TRUNCATE)
        if os.path.isdir("/dev/shm"):
            allow("/dev/shm", READ | write)
        if os.geteuid() != 0 and _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"off (prctl(NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())})"
        if libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return f"off (landlock_restrict_self: {os.strerror(ctypes.get_errno())})"
    finally:
        os.close(ruleset)
    extra = (", tcp" if abi >= 4 else "") + (", signals" if abi >= 6 else "")
    return f"on (ABI {abi}; writes only to {len(allowed)} dirs{extra})"
