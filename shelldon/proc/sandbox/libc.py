"""Syscalls through libc (ctypes): the handles and the errno check every layer uses."""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_LIBC = ctypes.CDLL(None, use_errno=True)
_syscall = _LIBC.syscall
_syscall.restype = ctypes.c_long
_prctl = _LIBC.prctl
_prctl.restype = ctypes.c_int
_prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _pidfd(pid: int) -> int:
    """A pidfd of ``pid``, or -1 where the kernel has none or the process is gone."""
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return -1
