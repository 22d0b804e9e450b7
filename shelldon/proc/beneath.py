"""Open a path beneath a directory descriptor without following any symlink on the way.

The jail decides on a resolved path (``root`` + a relative path with no symlink and no ``..``);
this module makes the open match the decision even when something swaps a directory for a
symlink in between (a backup, run as root, reads the workspace through it too).
``open_beneath`` asks the kernel for exactly that in one call, openat2(2) with
``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` (Linux >= 5.6). Where openat2
is missing (ENOSYS) or filtered (EPERM, as container seccomp profiles do), it walks the path
one component at a time from the root descriptor with ``O_NOFOLLOW``, which refuses the same
things at the cost of one syscall per directory. Either way a symlink anywhere on the path
fails the open (ELOOP or ENOTDIR) instead of being followed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from pathlib import PurePosixPath

# openat2 has the same number on every architecture the Pi runs (arm, aarch64) and on x86_64.
SYS_OPENAT2 = 437

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS

# What walking needs of a directory: a handle to resolve names against, no read permission.
_DIR_STEP = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _Resolver:
    """Which way opens go in this process: openat2 until the kernel or a filter refuses it."""

    openat2 = True


_state = _Resolver()


def resolver_in_use() -> str:
    """``"openat2"`` or ``"walk"``: how ``open_beneath`` resolves paths in this process now."""
    return "openat2" if _state.openat2 else "walk"


def _parts(inside: PurePosixPath | str) -> tuple[str, ...]:
    """The components of a jail-resolved relative path; anything else is a caller's bug."""
    path = PurePosixPath(inside)
    if path.is_absolute() or any(part in ("..", "") for part in path.parts):
        raise ValueError(f"open_beneath takes a resolved relative path, not {str(inside)!r}")
    return path.parts


def _openat2(root_fd: int, path: str, flags: int, mode: int) -> int:
    """One openat2 call; raises OSError (ENOSYS/EPERM when it is unavailable)."""
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, RESOLVE)
    encoded = os.fsencode(path)
    while True:
        fd = _libc.syscall(
            ctypes.c_long(SYS_OPENAT2),
            ctypes.c_long(root_fd),
            ctypes.c_char_p(encoded),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        code = ctypes.get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code), path)


def walk_beneath(root_fd: int, inside: PurePosixPath | str, flags: int, mode: int = 0o600) -> int:
    """Open ``inside`` under ``root_fd`` one component at a time, never following a symlink."""
    parts = _parts(inside)
    if not parts:
        return os.open(".", flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=root_fd)
    fd = root_fd
    try:
        for part in parts[:-1]:
            step = os.open(part, _DIR_STEP, dir_fd=fd)
            if fd != root_fd:
                os.close(fd)
            fd = step
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
    finally:
        if fd != root_fd:
            os.close(fd)


def open_beneath(root_fd: int, inside: PurePosixPath | str, flags: int, mode: int = 0o600) -> int:
    """A descriptor for ``inside`` (relative, resolved) under ``root_fd``, opened with
    ``flags``; raises OSError, ELOOP or ENOTDIR where a symlink stands on the path."""
    parts = _parts(inside)
    if _state.openat2:
        try:
            return _openat2(root_fd, "/".join(parts) or ".", flags, mode)
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EPERM):
                raise
            # Missing, or refused by a seccomp filter (which never lifts): walk from now on. A
            # genuine EPERM (an immutable file opened for writing) comes back from the walk too,
            # and only costs this process the faster path.
            _state.openat2 = False
    return walk_beneath(root_fd, inside, flags, mode)


def make_dirs_beneath(root_fd: int, inside: PurePosixPath | str, mode: int = 0o755) -> int:
    """A readable descriptor for the directory ``inside`` under ``root_fd``, creating missing
    directories on the way; no symlink is followed, existing or swapped in meanwhile."""
    flags = os.O_RDONLY | os.O_DIRECTORY
    try:
        return open_beneath(root_fd, inside, flags)
    except FileNotFoundError:
        pass
    fd = root_fd
    try:
        for part in _parts(inside):
            try:
                step = os.open(part, _DIR_STEP, dir_fd=fd)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, mode, dir_fd=fd)
                step = os.open(part, _DIR_STEP, dir_fd=fd)
            if fd != root_fd:
                os.close(fd)
            fd = step
        return os.open(".", flags | os.O_CLOEXEC, dir_fd=fd)
    finally:
        if fd != root_fd:
            os.close(fd)
