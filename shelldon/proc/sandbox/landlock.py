"""Landlock through raw syscalls: rulesets (prebuilt by the parent where it can), applied by the
child.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import stat
import struct
from collections.abc import Iterable

import structlog

from shelldon.proc.sandbox.libc import _PR_SET_NO_NEW_PRIVS, _check, _prctl, _syscall

log = structlog.get_logger(__name__)

_NR_LANDLOCK_CREATE_RULESET = 444
_NR_LANDLOCK_ADD_RULE = 445
_NR_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1

_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_REMOVE_DIR = 1 << 4
_FS_REMOVE_FILE = 1 << 5
_FS_MAKE_CHAR = 1 << 6
_FS_MAKE_DIR = 1 << 7
_FS_MAKE_REG = 1 << 8
_FS_MAKE_SOCK = 1 << 9
_FS_MAKE_FIFO = 1 << 10
_FS_MAKE_BLOCK = 1 << 11
_FS_MAKE_SYM = 1 << 12
_FS_REFER = 1 << 13
_FS_TRUNCATE = 1 << 14
_FS_IOCTL_DEV = 1 << 15
_NET_BIND_TCP = 1 << 0
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
_SCOPE_SIGNAL = 1 << 1

_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_READ_RIGHTS = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
_WRITE_RIGHTS = (
    _FS_WRITE_FILE
    | _FS_REMOVE_DIR
    | _FS_REMOVE_FILE
    | _FS_MAKE_DIR
    | _FS_MAKE_REG
    | _FS_MAKE_SOCK
    | _FS_MAKE_FIFO
    | _FS_MAKE_SYM
    | _FS_REFER
    | _FS_TRUNCATE
)


@functools.cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when it has none (stock Raspberry Pi OS)."""
    ret = _syscall(
        ctypes.c_long(_NR_LANDLOCK_CREATE_RULESET),
        ctypes.c_void_p(None),
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    return int(ret) if ret > 0 else 0


def _handled_fs(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


def _landlock_ruleset(
    read_only: Iterable[str], read_write: Iterable[str], *, network: bool, abi: int
) -> int:
    """A Landlock ruleset fd holding ``read_only`` and ``read_write`` rules (not yet applied)."""
    handled = _handled_fs(abi)
    net = 0 if network or abi < 4 else _NET_BIND_TCP | _NET_CONNECT_TCP
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("=QQQ", handled, net, scoped)
    elif abi >= 4:
        attr = struct.pack("=QQ", handled, net)
    else:
        attr = struct.pack("=Q", handled)
    attr_buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _check(
        _syscall(
            ctypes.c_long(_NR_LANDLOCK_CREATE_RULESET),
            attr_buf,
            ctypes.c_size_t(len(attr)),
            ctypes.c_uint32(0),
        ),
        "landlock_create_ruleset",
    )
    try:
        for path in read_only:
            _landlock_allow(ruleset, path, _READ_RIGHTS & handled)
        for path in read_write:
            _landlock_allow(ruleset, path, (_READ_RIGHTS | _WRITE_RIGHTS) & handled)
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset


def _landlock_apply(ruleset: int) -> None:
    """Restrict the calling process by ``ruleset`` (and close it)."""
    try:
        _check(_prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        _check(
            _syscall(
                ctypes.c_long(_NR_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)
            ),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset)


def _apply_prebuilt(ruleset: int | None, abi: int) -> bool:
    """Apply a ruleset the parent built, plus this process's own ``/proc/self``; False (build
    afresh) if there is none or it is unusable."""
    if ruleset is None:
        return False
    try:
        # /proc/self resolves when opened: added here, it is this process's own.
        _landlock_allow(ruleset, "/proc/self", _READ_RIGHTS & _handled_fs(abi))
    except OSError as exc:
        log.warning("landlock_prebuilt_unusable", error=str(exc))
        with contextlib.suppress(OSError):
            os.close(ruleset)
        return False
    _landlock_apply(ruleset)
    return True


class Rulesets:
    """Landlock rulesets a forking process builds once and every worker it forks only applies:
    building one opens and adds ~20 paths (about 1 ms); the worker then adds just its own
    /proc/self. The owner never restricts itself, so a ruleset serves every fork. Owned by
    whoever forks the workers (the zygote); a process forked after it starts without one."""

    def __init__(self) -> None:
        self._built: dict[tuple[tuple[str, ...], tuple[str, ...], bool, int], int] = {}

    def fds(self) -> tuple[int, ...]:
        """The rulesets held open for the children the owner forks."""
        return tuple(self._built.values())

    def get(
        self, ro: tuple[str, ...], rw: tuple[str, ...], *, network: bool, abi: int
    ) -> int | None:
        """The ruleset for these rules, built on first use (None: none could be built now;
        each child then builds its own)."""
        key = (ro, rw, network, abi)
        if not all(os.path.exists(path) for path in rw):
            # A rule can only name a path that exists: a ruleset built now would lock the
            # workspace out of every worker it is handed to. Each worker builds its own.
            log.warning("landlock_not_prebuilt", missing=[p for p in rw if not os.path.exists(p)])
            return None
        if key not in self._built:
            # One at a time: an owner whose settings changed must not hand stale rulesets down.
            for fd in self._built.values():
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._built.clear()
            self._built[key] = _landlock_ruleset(ro, rw, network=network, abi=abi)
        return self._built[key]


def _landlock_allow(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path this machine does not have
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FILE_RIGHTS
        if path.startswith("/dev/"):
            rights |= _FS_WRITE_FILE & _FILE_RIGHTS
        attr = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
        _check(
            _syscall(
                ctypes.c_long(_NR_LANDLOCK_ADD_RULE),
                ctypes.c_int(ruleset),
                ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
                attr,
                ctypes.c_uint32(0),
            ),
            f"landlock_add_rule({path})",
        )
    finally:
        os.close(fd)
