"""seccomp-bpf through libseccomp: build a filter program in the parent, load it in the child."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os

from shelldon.proc.sandbox.libc import (
    _PR_SET_NO_NEW_PRIVS,
    _PR_SET_SECCOMP,
    _SECCOMP_MODE_FILTER,
    _check,
    _prctl,
)
from shelldon.proc.sandbox.policy import (
    _CLONE_NS_FLAGS,
    _NAMESPACE_SYSCALLS,
    DENIED_SOCKET_FAMILIES,
    DENIED_SYSCALLS,
    SandboxError,
)

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
def seccomp_available() -> bool:
    """libseccomp loads and the kernel has seccomp filters."""
    if _libseccomp() is None:
        return False
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
        program = os.memfd_create("seccomp-bpf", os.MFD_CLOEXEC)
        try:
            rc = lib.seccomp_export_bpf(ctx, program)
            if rc < 0:
                raise SandboxError(f"seccomp_export_bpf failed: {os.strerror(-rc)}")
            return os.pread(program, os.fstat(program).st_size, 0)
        finally:
            os.close(program)
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
