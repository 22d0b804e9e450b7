"""Who may look into a process: ``PR_SET_DUMPABLE``.

A process that is not dumpable cannot be ptraced, and its ``/proc/<pid>/mem``, ``environ``,
``fd/`` and ``maps`` cannot be opened, by any other process of the same user without
``CAP_SYS_PTRACE``: an owner-approved shell command, or code that got out of a worker, cannot
read the bot token and the API key out of the service's memory, nor drive the zygote. Set once
in the main process before the zygote is forked (fork keeps it; exec of a normal binary resets
it, so a gate's pytest is dumpable again, and holds no secret). The user-namespace layer turns
it back on for its uid and gid map writes (``userns.py``).
"""

from __future__ import annotations

import ctypes

from shelldon.proc.sandbox.libc import _LIBC, _check, _prctl

_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4


def dumpable() -> bool:
    """Whether the calling process is dumpable."""
    return _check(_prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_GET_DUMPABLE)") == 1


def set_dumpable(on: bool) -> None:
    """Make the calling process dumpable or not (raises ``OSError`` if the kernel refuses)."""
    _check(_prctl(_PR_SET_DUMPABLE, int(on), 0, 0, 0), "prctl(PR_SET_DUMPABLE)")


def forbid_dumps() -> None:
    """Make the calling process (and every process it forks from now on) not dumpable."""
    set_dumpable(False)


_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_LAST = 63


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def drop_capabilities() -> None:
    """Give up every capability the calling process has, for good (bounding set, ambient,
    effective, permitted, inheritable). A worker under the namespace layer holds all of them
    inside its user namespace, and ``CAP_SYS_PTRACE`` there would let a child of it open the
    worker's ``/proc/<pid>/mem`` whatever its dumpable flag: a self-coded tool's child drops
    them before the tool's code is loaded. A process that holds none (a service outside any
    user namespace) is left as it is: ``capset`` itself may be filtered there (the unit's
    ``~@privileged``). Raises ``OSError`` if capabilities are held and cannot be dropped."""
    for cap in range(_CAP_LAST + 1):
        _prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last cap, EPERM without SETPCAP
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_LIBC.capget(ctypes.byref(header), ctypes.byref(data)), "capget")
    if not any(d.effective or d.permitted or d.inheritable for d in data):
        return
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_LIBC.capset(ctypes.byref(header), ctypes.byref(data)), "capset")
