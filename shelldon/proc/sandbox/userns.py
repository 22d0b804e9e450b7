"""The user + mount (+ net) namespace layer: a tmpfs root with bind mounts of the allowlist only."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import stat
import sys
from collections.abc import Callable, Iterable

from shelldon.proc.sandbox.dumpable import dumpable, set_dumpable
from shelldon.proc.sandbox.libc import _LIBC, _check, _syscall
from shelldon.proc.sandbox.policy import _READ_ONLY_ROOTS

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MNT_DETACH = 2
_NEW_ROOT = "/tmp"  # noqa: S108 - a mount point inside a private namespace, not a temp file

_mount = _LIBC.mount
# mount(source, target, fstype, flags, data)
_mount.argtypes = (ctypes.c_char_p,) * 3 + (ctypes.c_ulong, ctypes.c_void_p)
_umount2 = _LIBC.umount2
_umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
_unshare = _LIBC.unshare
_unshare.argtypes = (ctypes.c_int,)


@functools.cache
def userns_available() -> bool:
    """Can this process build the whole user + mount namespace layer? Probed once, in a fork
    that does exactly what a worker would, so a worker never finds it half-possible."""
    return probe_in_fork(
        lambda: _userns_restrict((sys.prefix, *_READ_ONLY_ROOTS), (), network=False)
    )


def probe_in_fork(attempt: Callable[[], object]) -> bool:
    """Whether ``attempt`` works, tried in a forked child (whatever it changes dies there)."""
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid == 0:  # pragma: no cover - the probe child
        code = 1
        with contextlib.suppress(BaseException):
            code = 0 if attempt() is not False else 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def enter_user_namespace(flags: int, what: str) -> None:
    """``unshare(CLONE_NEWUSER | flags)`` and map the caller's own uid and gid only (the one
    mapping an unprivileged process may write). Raises ``OSError``."""
    uid, gid = os.geteuid(), os.getegid()
    _check(_unshare(_CLONE_NEWUSER | flags), what)
    # A process that is not dumpable (forked from the service) cannot write its own maps (they
    # belong to root then): dumpable for these writes only, then back as it was.
    was_dumpable = dumpable()
    set_dumpable(True)
    try:
        with contextlib.suppress(OSError):
            _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    finally:
        set_dumpable(was_dumpable)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _mount_checked(src: str | None, dst: str, fstype: str | None, flags: int) -> None:
    ret = _mount(
        src.encode() if src else None,
        dst.encode(),
        fstype.encode() if fstype else None,
        flags,
        None,
    )
    _check(ret, f"mount {src} on {dst}")


def _userns_restrict(read_only: Iterable[str], read_write: Iterable[str], *, network: bool) -> None:
    """Enter a new user + mount (and, unless ``network``, net) namespace whose root is a tmpfs
    holding bind mounts of the allowed paths only, the read-only ones remounted read-only."""
    cwd = os.getcwd()
    flags = _CLONE_NEWUSER | _CLONE_NEWNS | (0 if network else _CLONE_NEWNET)
    enter_user_namespace(flags, "unshare(user+mount)")
    _mount_checked(None, "/", None, _MS_REC | _MS_PRIVATE)
    # Every source is opened before the tmpfs goes on, which may hide some of them (/tmp/...).
    sources: list[tuple[str, int, bool]] = []
    for paths, writable in ((read_only, False), (read_write, True), (("/proc",), True)):
        for path in paths:
            with contextlib.suppress(OSError):
                sources.append((path, os.open(path, os.O_PATH | os.O_CLOEXEC), writable))
    # The new root is a tmpfs mounted over a directory only this namespace sees it on.
    root = _NEW_ROOT if os.path.isdir(_NEW_ROOT) else "/mnt"
    _mount_checked("shelldon", root, "tmpfs", _MS_NOSUID | _MS_NODEV)
    ro_mounts: list[str] = []
    try:
        for path, fd, writable in sources:
            target = _bind_into(root, path, fd)
            if not writable:
                ro_mounts.append(target)
    finally:
        for _path, fd, _writable in sources:
            os.close(fd)
    for link in _READ_ONLY_ROOTS:
        # /bin -> usr/bin and friends: the same links inside, so #! lines and $PATH still work.
        if os.path.islink(link) and not os.path.lexists(root + link):
            os.symlink(os.readlink(link), root + link)
    for target in ro_mounts:
        # A read-only remount must keep the flags the outer namespace locked (nosuid, nodev,
        # noexec); statvfs reports them.
        locked = _locked_flags(target)
        _mount_checked(None, target, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | locked)
    os.chdir(root)
    old = root + "/.old-root"
    os.makedirs(old, exist_ok=True)
    _check(_syscall(ctypes.c_long(_pivot_root_nr()), b".", old.encode()), "pivot_root")
    os.chdir("/")
    _check(_umount2(b"/.old-root", _MNT_DETACH), "umount old root")
    with contextlib.suppress(OSError):
        os.rmdir("/.old-root")
    _mount_checked(None, "/", None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    with contextlib.suppress(OSError):
        os.chdir(cwd)


_PIVOT_ROOT = {"x86_64": 155, "i686": 217, "i386": 217, "armv7l": 218, "armv6l": 218}


def _pivot_root_nr() -> int:
    # glibc has no pivot_root wrapper; aarch64 and riscv64 use the generic table's 41.
    return _PIVOT_ROOT.get(os.uname().machine, 41)


def _locked_flags(target: str) -> int:
    try:
        st = os.statvfs(target)
    except OSError:
        return 0
    flags = 0
    if st.f_flag & os.ST_NOSUID:
        flags |= _MS_NOSUID
    if st.f_flag & os.ST_NODEV:
        flags |= _MS_NODEV
    if st.f_flag & os.ST_NOEXEC:
        flags |= 8  # MS_NOEXEC
    return flags


def _bind_into(root: str, path: str, fd: int) -> str:
    st = os.fstat(fd)
    target = root + path
    if stat.S_ISDIR(st.st_mode):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
    _mount_checked(f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC)
    return target
