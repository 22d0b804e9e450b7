"""Kernel confinement for the worker and the gate: seccomp, a filesystem layer, a cgroup per turn.

Three layers, each detected at start and used where the kernel offers it:

- **seccomp-bpf** (libseccomp through ctypes): dangerous syscalls (ptrace, bpf, keyctl, mount,
  unshare, kernel modules, reboot, ...) fail with EPERM; for FREE-only turns and the gate also
  ``socket()`` of the IP, packet and netlink families (AF_UNIX stays).
- **filesystem**, the strongest available: Landlock (read-only on what Python needs, read-write
  on the workspace or the gate's staging dir, nothing else), else an unprivileged user + mount
  namespace that shows only those paths, else nothing (the path jail alone; warned once).
- **a cgroup per turn** under a delegated cgroup: ``memory.max``/``pids.max`` where the
  controllers exist and ``cgroup.kill`` at the end, which also ends ``setsid`` stragglers.

``[sandbox] mode``: ``required`` refuses to start without seccomp and a filesystem layer
(``check_required``), ``best-effort`` uses what there is, ``off`` applies nothing. The filter
programs and path lists are prepared in the parent; the child only makes syscalls.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import functools
import itertools
import os
import stat
import struct
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import structlog

from shelldon.config import SandboxSettings, Settings

log = structlog.get_logger(__name__)

FS_LAYERS = ("landlock", "userns", "none")

DENIED_SYSCALLS = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "bpf",
    "keyctl",
    "add_key",
    "request_key",
    "mount",
    "umount2",
    "pivot_root",
    "unshare",
    "setns",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "perf_event_open",
    "io_uring_setup",
    "userfaultfd",
    "open_by_handle_at",
    "fsopen",
    "fsmount",
    "move_mount",
    "open_tree",
)
"""Syscalls no worker, tool or gate run needs; they fail with EPERM."""

_NAMESPACE_SYSCALLS = frozenset({"mount", "umount2", "pivot_root", "unshare", "setns"})

AF_INET, AF_INET6, AF_NETLINK, AF_PACKET = 2, 10, 16, 17
DENIED_SOCKET_FAMILIES = (AF_INET, AF_INET6, AF_PACKET, AF_NETLINK)

_CLONE_NS_FLAGS = (
    0x10000000,
    0x20000000,
    0x40000000,
    0x00020000,
    0x04000000,
    0x08000000,
    0x02000000,
)
# CLONE_NEWUSER, NEWPID, NEWNET, NEWNS, NEWUTS, NEWIPC, NEWCGROUP: clone() that makes a namespace

_READ_ONLY_ROOTS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin")
_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/python3",
    "/etc/python3.11",
)
_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full")


class SandboxError(RuntimeError):
    """A layer that ``mode = required`` demands could not be applied; the text says which."""


# ------------------------------------------------------------------ syscalls through libc

_LIBC = ctypes.CDLL(None, use_errno=True)
_syscall = _LIBC.syscall
_syscall.restype = ctypes.c_long
_prctl = _LIBC.prctl
_prctl.restype = ctypes.c_int
_prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_PR_GET_SECCOMP = 21


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


# ------------------------------------------------------------------ seccomp via libseccomp

_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_CMP_EQ = 4
_SCMP_CMP_MASKED_EQ = 7


def _scmp_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = (
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    )


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


@functools.cache
def _libseccomp() -> ctypes.CDLL | None:
    """libseccomp.so.2, or None (it ships with systemd, so a Pi has it)."""
    for name in ("libseccomp.so.2", ctypes.util.find_library("seccomp")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name, use_errno=True)
        except OSError:
            continue
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_init.argtypes = (ctypes.c_uint32,)
        lib.seccomp_release.argtypes = (ctypes.c_void_p,)
        lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
        lib.seccomp_syscall_resolve_name.argtypes = (ctypes.c_char_p,)
        lib.seccomp_rule_add_array.argtypes = (
            ctypes.c_void_p,
            ctypes.c_uint32,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.POINTER(_ArgCmp),
        )
        lib.seccomp_export_bpf.argtypes = (ctypes.c_void_p, ctypes.c_int)
        return lib
    return None


@functools.cache
def _seccomp_kernel() -> bool:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            return any(line.startswith("Seccomp:") for line in fh)
    except OSError:
        return False


@functools.cache
def build_filter(*, network: bool, namespaces: bool = True) -> bytes:
    """The BPF program (raw ``sock_filter`` array) that denies ``DENIED_SYSCALLS`` with EPERM
    and, unless ``network``, IP/packet/netlink sockets; ``namespaces=False`` leaves the
    namespace calls allowed (for a worker that still has to build its user namespace)."""
    lib = _libseccomp()
    if lib is None:
        raise SandboxError(
            "libseccomp.so.2 is not installed (apt install libseccomp2); seccomp is unavailable"
        )
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        raise SandboxError("seccomp_init failed")
    eperm = _scmp_errno(errno.EPERM)
    try:

        def rule(action: int, name: str, *cmps: _ArgCmp) -> None:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:
                return  # not on this architecture
            array = (_ArgCmp * len(cmps))(*cmps) if cmps else None
            rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), array)
            if rc < 0:
                raise SandboxError(f"seccomp rule for {name} failed: {os.strerror(-rc)}")

        for name in DENIED_SYSCALLS:
            if namespaces or name not in _NAMESPACE_SYSCALLS:
                rule(eperm, name)
        if namespaces:
            # clone() with a namespace flag is unshare by another name; clone3 hides its flags
            # in memory seccomp cannot read, so it reports ENOSYS and libc falls back to clone.
            for flag in _CLONE_NS_FLAGS:
                rule(eperm, "clone", _ArgCmp(0, _SCMP_CMP_MASKED_EQ, flag, flag))
            rule(_scmp_errno(errno.ENOSYS), "clone3")
        if not network:
            for family in DENIED_SOCKET_FAMILIES:
                rule(eperm, "socket", _ArgCmp(0, _SCMP_CMP_EQ, family, 0))
        read_end, write_end = os.pipe()
        try:
            rc = lib.seccomp_export_bpf(ctx, write_end)
            os.close(write_end)
            write_end = -1
            if rc < 0:
                raise SandboxError(f"seccomp_export_bpf failed: {os.strerror(-rc)}")
            chunks = []
            while chunk := os.read(read_end, 65536):
                chunks.append(chunk)
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)
        return b"".join(chunks)
    finally:
        lib.seccomp_release(ctx)


def load_filter(program: bytes) -> None:
    """Install ``program`` on the calling thread (and what it later forks or execs)."""
    if len(program) % 8:
        raise SandboxError("seccomp program is not a whole number of instructions")
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(_prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    _check(
        _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0),
        "prctl(PR_SET_SECCOMP)",
    )


# ------------------------------------------------------------------ Landlock via raw syscalls

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
        for paths, rights in (
            (read_only, _READ_RIGHTS),
            (read_write, _READ_RIGHTS | _WRITE_RIGHTS),
        ):
            for path in paths:
                _landlock_allow(ruleset, path, rights & handled)
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


def _landlock_restrict(
    read_only: Iterable[str], read_write: Iterable[str], *, network: bool, abi: int
) -> None:
    _landlock_apply(_landlock_ruleset(read_only, read_write, network=network, abi=abi))


# Rulesets a parent builds once and every worker it forks only applies: building one opens
# and adds ~20 paths (about 1 ms); the worker then adds just its own /proc/self. The parent
# never restricts itself, so the fd is reusable for every fork. Keyed by the rules' inputs.
_prebuilt: dict[tuple[tuple[str, ...], tuple[str, ...], bool, int], int] = {}


def prebuilt_ruleset_fds() -> tuple[int, ...]:
    """Descriptors a forked worker must keep open while it closes the rest."""
    return tuple(_prebuilt.values())


def forget_prebuilt() -> None:
    """Drop the rulesets built so far without closing them: for a freshly forked process that
    has just closed every inherited descriptor (the numbers may be reused by anything now)."""
    _prebuilt.clear()


def _apply_prebuilt(ruleset: int | None, abi: int) -> bool:
    """Apply a ruleset the parent built; False (build afresh) if there is none or it is unusable."""
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


def _prebuild_landlock(ro: tuple[str, ...], rw: tuple[str, ...], *, network: bool) -> None:
    key = (ro, rw, network, landlock_abi())
    if not all(os.path.exists(path) for path in rw):
        # A rule can only name a path that exists: a ruleset built now would lock the workspace
        # out of every worker it is handed to. Build nothing; each worker builds its own.
        log.warning("landlock_not_prebuilt", missing=[p for p in rw if not os.path.exists(p)])
        return
    if key not in _prebuilt:
        # One at a time: a parent whose settings changed must not hand stale rulesets down.
        for fd in _prebuilt.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        _prebuilt.clear()
        _prebuilt[key] = _landlock_ruleset(ro, rw, network=network, abi=key[3])


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


# ------------------------------------------------------------------ user + mount namespace

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
_mount.argtypes = (
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
)
_umount2 = _LIBC.umount2
_umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
_unshare = _LIBC.unshare
_unshare.argtypes = (ctypes.c_int,)


@functools.cache
def userns_available() -> bool:
    """Can this process build the whole user + mount namespace layer? Probed once, in a fork
    that does exactly what a worker would, so a worker never finds it half-possible."""
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid == 0:  # pragma: no cover - the probe child
        code = 1
        with contextlib.suppress(BaseException):
            _userns_restrict((sys.prefix, *_READ_ONLY_ROOTS), (), network=False)
            code = 0
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


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
    uid, gid = os.geteuid(), os.getegid()
    cwd = os.getcwd()
    flags = _CLONE_NEWUSER | _CLONE_NEWNS | (0 if network else _CLONE_NEWNET)
    _check(_unshare(flags), "unshare(user+mount)")
    with contextlib.suppress(OSError):
        _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
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


# ------------------------------------------------------------------ cgroup per turn

_CGROUP_FS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))


def _v2_mount() -> Path | None:
    for base in _CGROUP_FS:
        if (base / "cgroup.controllers").exists() or (base / "cgroup.procs").exists():
            if base == Path("/sys/fs/cgroup") and not (base / "cgroup.controllers").exists():
                continue
            return base
    return None


_SERVICE_LEAF = "service"


def delegated_cgroup() -> Path | None:
    """This service's own cgroup when systemd delegated it (``Delegate=yes``): the directory
    is ours (owned by our uid, or marked with the ``trusted.delegate``/``user.delegate`` xattr)."""
    base = _v2_mount()
    if base is None:
        return None
    try:
        with open("/proc/self/cgroup", encoding="ascii") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    rel = next((line[3:] for line in lines if line.startswith("0::")), None)
    if not rel or rel == "/":
        return None
    path = base / rel.lstrip("/")
    if path.name == _SERVICE_LEAF:
        path = path.parent  # prepare_delegated_cgroup moved us into <delegated>/service
    marked = False
    for attr in ("trusted.delegate", "user.delegate"):
        with contextlib.suppress(OSError):
            os.getxattr(path, attr)
            marked = True
    try:
        owned = os.geteuid() != 0 and path.stat().st_uid == os.geteuid()
    except OSError:
        return None
    return path if (marked or owned) and os.access(path, os.W_OK) else None


def cgroup_parent(sandbox: SandboxSettings) -> Path | None:
    """Where per-turn cgroups go: ``[sandbox] cgroup`` if set, else the delegated subtree's
    ``turns`` child (created by ``prepare_delegated_cgroup``), else None (RLIMITs only)."""
    if sandbox.cgroup:
        path = Path(sandbox.cgroup)
        return path if (path / "cgroup.procs").exists() and os.access(path, os.W_OK) else None
    delegated = delegated_cgroup()
    if delegated is not None and (delegated / "turns" / "cgroup.procs").exists():
        return delegated / "turns"
    return None


def prepare_delegated_cgroup() -> Path | None:
    """At service start, under ``Delegate=yes``: move the service into ``<cg>/service``, enable
    the memory and pids controllers for children and create ``<cg>/turns``; returns it."""
    delegated = delegated_cgroup()
    if delegated is None:
        return None
    try:
        leaf = delegated / _SERVICE_LEAF
        leaf.mkdir(exist_ok=True)
        for pid in (delegated / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (leaf / "cgroup.procs").write_text(pid)
        available = (delegated / "cgroup.controllers").read_text().split()
        wanted = [c for c in ("memory", "pids") if c in available]
        if wanted:
            (delegated / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
        turns = delegated / "turns"
        turns.mkdir(exist_ok=True)
        if wanted:
            with contextlib.suppress(OSError):
                (turns / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
    except OSError as exc:
        log.warning("cgroup_delegation_unusable", cgroup=str(delegated), error=str(exc))
        return None
    return turns


@dataclass(frozen=True, slots=True)
class TurnCgroup:
    """One turn's (or gate run's) cgroup: the child joins it, the parent kills and removes it."""

    path: Path

    def join(self) -> None:
        """Move the calling process into this cgroup (call it in the child, before it runs code)."""
        _write(str(self.path / "cgroup.procs"), "0")

    def adopt(self, pid: int) -> None:
        """Move ``pid`` (a child just forked) into this cgroup from the parent's side.

        A migration costs ~3 ms here (the kernel syncs RCU); done by the parent it overlaps the
        child's own start-up. Raises ``OSError``; the caller kills the child on failure.
        """
        _write(str(self.path / "cgroup.procs"), str(pid))

    def kill(self) -> None:
        """SIGKILL every process in the cgroup, ``setsid`` and double-forked stragglers too."""
        with contextlib.suppress(OSError):
            _write(str(self.path / "cgroup.kill"), "1")

    def close(self, timeout_s: float = 1.0) -> None:
        """Kill what is left and remove the cgroup (waits briefly for the kernel to empty it)."""
        self.kill()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if time.monotonic() >= deadline:
                    log.warning("cgroup_not_removed", cgroup=str(self.path), error=str(exc))
                    return
                time.sleep(0.002)

    def pids(self) -> list[int]:
        """The processes now in the cgroup."""
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []


def open_turn_cgroup(sandbox: SandboxSettings, name: str) -> TurnCgroup | None:
    """Create ``<parent>/<name>`` with ``memory.max``/``pids.max`` where those controllers exist;
    None when there is no usable cgroup parent or the mode is ``off``."""
    if sandbox.mode == "off":
        return None
    parent = cgroup_parent(sandbox)
    if parent is None:
        return None
    path = parent / name
    try:
        path.mkdir()
    except FileExistsError:
        pass
    except OSError as exc:
        log.warning("cgroup_not_created", cgroup=str(path), error=str(exc))
        return None
    caps = (
        ("memory.max", str(sandbox.memory_max_mb * 1024 * 1024)),
        ("memory.swap.max", "0"),
        ("pids.max", str(sandbox.pids_max)),
    )
    for knob, value in caps:
        if (path / knob).exists():
            with contextlib.suppress(OSError):
                _write(str(path / knob), value)
    return TurnCgroup(path)


# ------------------------------------------------------------------ the plan


@dataclass(frozen=True, slots=True)
class Plan:
    """What confinement a process gets: mode, seccomp on/off, the filesystem layer."""

    mode: str
    seccomp: bool
    fs: str


def seccomp_available() -> bool:
    """libseccomp loads and the kernel has seccomp filters."""
    return _libseccomp() is not None and _seccomp_kernel()


@functools.cache
def plan(sandbox: SandboxSettings) -> Plan:
    """The layers this machine offers under ``sandbox`` (``fs`` forces the filesystem layer)."""
    if sandbox.mode == "off":
        return Plan("off", False, "none")
    if sandbox.fs in FS_LAYERS:
        fs = sandbox.fs
    elif landlock_abi() > 0:
        fs = "landlock"
    elif userns_available():
        fs = "userns"
    else:
        fs = "none"
    return Plan(sandbox.mode, seccomp_available(), fs)


def check_required(settings: Settings) -> None:
    """Raise ``SandboxError`` when ``mode = required`` and seccomp or a filesystem layer is
    missing (call at service start); log the layers either way."""
    p = plan(settings.sandbox)
    for name, active, detail in describe(settings):
        log.info("sandbox_layer", layer=name, active=active, detail=detail)
    if p.mode == "off":
        log.warning("sandbox_off", hint="[sandbox] mode = off: the path jail alone guards files")
        return
    missing = []
    if not p.seccomp:
        missing.append("seccomp (install libseccomp2)")
    if p.fs == "none":
        missing.append(
            "a filesystem layer (a kernel with Landlock, or unprivileged user namespaces: "
            "sysctl kernel.unprivileged_userns_clone=1)"
        )
    if not missing:
        return
    if p.mode == "required":
        raise SandboxError(
            "[sandbox] mode = required, but this machine lacks "
            + " and ".join(missing)
            + "; fix that or set [sandbox] mode = best-effort"
        )
    log.warning("sandbox_degraded", missing=", ".join(missing))


def required_layer(settings: Settings, name: str) -> bool:
    """Is ``describe``'s line ``name`` one that ``mode = required`` refuses to start without?"""
    return settings.sandbox.mode == "required" and name in ("seccomp", "filesystem layer")


def describe(settings: Settings | None = None) -> list[tuple[str, bool, str]]:
    """One (name, active, detail) line per layer, for ``shelldon doctor`` and the start log."""
    sandbox = settings.sandbox if settings is not None else SandboxSettings()
    p = plan(sandbox)
    on = p.mode != "off"
    abi = landlock_abi()
    lines = [
        ("mode", on, f"{p.mode}" + (" (nothing is applied)" if not on else "")),
        (
            "seccomp",
            on and p.seccomp,
            "libseccomp found; ptrace, bpf, keyctl, mount, unshare, modules denied"
            if p.seccomp
            else "unavailable: libseccomp.so.2 missing or no kernel seccomp",
        ),
        (
            "landlock",
            on and p.fs == "landlock",
            f"kernel ABI {abi}" if abi else "kernel has no Landlock (stock Raspberry Pi OS)",
        ),
        (
            "user+mount namespace",
            on and p.fs == "userns",
            (
                ("in use" if p.fs == "userns" else "available, the fallback when Landlock is not")
                if userns_available()
                else "unavailable (unprivileged user namespaces are disabled)"
            ),
        ),
        (
            "filesystem layer",
            on and p.fs != "none",
            p.fs if p.fs != "none" else "none: only the path jail guards files",
        ),
    ]
    parent = cgroup_parent(sandbox) if on else None
    lines.append(
        (
            "cgroup per turn",
            parent is not None,
            str(parent) if parent else "no delegated cgroup: RLIMITs + subreaper sweep",
        )
    )
    return lines


# ------------------------------------------------------------------ what to allow


def _python_paths() -> list[str]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.add(os.path.dirname(os.path.realpath(sys.executable)))
    paths.add(os.path.dirname(sys.executable))
    for entry in sys.path:
        if entry and os.path.isdir(entry):
            paths.add(os.path.abspath(entry))
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            continue
        name = getattr(module, "__name__", "")
        top = sys.modules.get(name.split(".", 1)[0])
        top_file = getattr(top, "__file__", None) if top is not None else None
        if isinstance(top_file, str) and os.path.basename(top_file) == "__init__.py":
            paths.add(os.path.dirname(os.path.abspath(top_file)))
        else:
            paths.add(os.path.dirname(os.path.abspath(file)))
    return sorted(paths)


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def allowed_paths(
    writable: Iterable[Path], never: Iterable[Path], extra_read: Iterable[str] = ()
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(read-only, read-write) path lists. A read-only path that contains a writable one (the
    home around the workspace) or one of ``never`` (vault, database, ~/.ssh) is dropped."""
    rw = tuple(os.path.realpath(p) for p in writable)
    banned = tuple(os.path.realpath(p) for p in never) + rw
    candidates = [*_READ_ONLY_ROOTS, *_ETC_FILES, *_python_paths(), *extra_read]
    ro: list[str] = []
    for raw in candidates:
        path = os.path.realpath(raw)
        if any(_is_within(b, path) for b in banned) or any(_is_within(path, w) for w in rw):
            continue
        if path not in ro and os.path.exists(path):
            ro.append(path)
    # A path inside another allowed one adds nothing but a rule (and a syscall per turn).
    ro = [p for p in ro if not any(q != p and _is_within(p, q) for q in ro)]
    return tuple(ro), rw + tuple(d for d in _DEVICES if os.path.exists(d))


def _never(settings: Settings) -> tuple[Path, ...]:
    return (settings.vault, settings.database, Path.home() / ".ssh", Path("/etc/shadow"))


@functools.cache
def _worker_paths(
    workspace: Path, never: tuple[Path, ...]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return allowed_paths((workspace,), never)


def prepare_worker(settings: Settings) -> TurnCgroup | None:
    """In the parent, before the fork: build what ``confine_worker`` needs (so the worker only
    makes syscalls) and open the turn's cgroup; the caller owns it (``close()`` at the end)."""
    p = plan(settings.sandbox)
    if p.mode == "off":
        return None
    try:
        if p.seccomp:
            build_filter(network=True, namespaces=p.fs != "userns")
            build_filter(network=False, namespaces=True)
        if p.fs != "none":
            global _prepared_paths  # noqa: PLW0603 - handed to the next forked worker
            ro, rw = _worker_paths(settings.workspace, _never(settings))
            _prepared_paths = (settings, ro, rw)
            if p.fs == "landlock":
                _prebuild_landlock(ro, rw, network=False)
    except (SandboxError, OSError) as exc:
        log.warning("sandbox_not_prepared", error=str(exc))
    return open_turn_cgroup(settings.sandbox, f"shelldon-turn-{os.getpid()}-{next(_turn_numbers)}")


_turn_numbers = itertools.count(1)
_prepared_paths: tuple[Settings, tuple[str, ...], tuple[str, ...]] | None = None


# ------------------------------------------------------------------ applying


_applied: set[str] = set()
"""Layers already on in this process (a resumed worker confines in two steps)."""


def _fail(p: Plan, layer: str, exc: BaseException) -> None:
    if p.mode == "required":
        raise SandboxError(f"sandbox layer {layer} could not be applied: {exc}") from exc
    log.warning("sandbox_layer_failed", layer=layer, error=str(exc))


def _apply_fs(p: Plan, ro: tuple[str, ...], rw: tuple[str, ...], *, network: bool) -> None:
    try:
        if p.fs == "landlock":
            abi = landlock_abi()
            if not _apply_prebuilt(_prebuilt.pop((ro, rw, network, abi), None), abi):
                _landlock_restrict((*ro, "/proc/self"), rw, network=network, abi=abi)
        elif p.fs == "userns":
            _userns_restrict(ro, rw, network=network)
        else:
            return
    except (OSError, SandboxError) as exc:
        if p.fs == "userns" and _in_new_userns():
            # Half a namespace is worse than none: stop this process instead of going on.
            raise SandboxError(f"the user namespace layer broke half-way: {exc}") from exc
        _fail(p, p.fs, exc)
        return
    _applied.add("fs")


def _in_new_userns() -> bool:
    try:
        return os.readlink("/proc/self/ns/user") != _INITIAL_USERNS
    except OSError:
        return True


_INITIAL_USERNS = os.readlink("/proc/self/ns/user") if os.path.exists("/proc/self/ns/user") else ""


def _apply_seccomp(p: Plan, *, network: bool, namespaces: bool) -> None:
    if not p.seccomp:
        return
    key = f"seccomp-{network}-{namespaces}"
    if key in _applied:
        return
    try:
        load_filter(build_filter(network=network, namespaces=namespaces))
    except (OSError, SandboxError) as exc:
        _fail(p, "seccomp", exc)
        return
    _applied.add(key)


def confine_worker(settings: Settings, *, network: bool, cgroup: TurnCgroup | None = None) -> None:
    """Confine the calling worker. ``network=True`` is the first step of a resumed turn whose
    owner-approved RISKY call runs next: only the syscall deny list (and the cgroup) go on.
    ``network=False`` closes everything: the filesystem layer and the socket filter too."""
    p = plan(settings.sandbox)
    if p.mode == "off":
        return
    if cgroup is not None and "cgroup" not in _applied:
        try:
            cgroup.join()
            _applied.add("cgroup")
        except OSError as exc:
            _fail(p, "cgroup", exc)
    if network:
        # The namespace calls stay allowed only when the user-namespace layer still needs them.
        _apply_seccomp(p, network=True, namespaces=p.fs != "userns")
        return
    if "fs" not in _applied:
        prepared = _prepared_paths
        if prepared is not None and prepared[0] is settings:
            # Computed by the parent before the fork: no lookups (page faults) in the worker.
            ro, rw = prepared[1], prepared[2]
        else:
            ro, rw = _worker_paths(settings.workspace, _never(settings))
        _apply_fs(p, ro, rw, network=False)
    _apply_seccomp(p, network=False, namespaces=True)


def gate_preexec(
    sandbox: SandboxSettings,
    staging: Path,
    private: Path,
    extra_read: Iterable[str],
    *,
    then: Callable[[], None] | None = None,
    cgroup: TurnCgroup | None = None,
) -> Callable[[], None]:
    """A ``preexec_fn`` for the gate's pytest: joins ``cgroup``, runs ``then`` (RLIMITs), and
    confines like a FREE-only worker with read-write on the staging dir (and its private tmp)."""
    p = plan(sandbox)
    home_guess = staging.parent.parent  # <home>/workspace/tools-staging
    never = (home_guess / "vault", home_guess / "shelldon.db", Path.home() / ".ssh")
    ro, rw = allowed_paths((staging, private), never, extra_read)
    if p.seccomp and p.mode != "off":
        build_filter(network=False, namespaces=True)  # built here, so the child only loads it

    def preexec() -> None:
        if then is not None:
            then()
        if p.mode == "off":
            return
        if cgroup is not None:
            try:
                cgroup.join()
            except OSError as exc:
                _fail(p, "cgroup", exc)
        _apply_fs(p, ro, rw, network=False)
        _apply_seccomp(p, network=False, namespaces=True)

    return preexec
