"""The calling process's own ties: die with the process that forked it, adopt orphans."""

from __future__ import annotations

import ctypes
import os
import signal

import structlog

from shelldon.proc.sandbox.libc import _PR_SET_PDEATHSIG, _prctl

log = structlog.get_logger(__name__)

PR_SET_CHILD_SUBREAPER = 36


def die_with_parent(parent_pid: int, exit_code: int) -> None:
    """Ask the kernel to SIGKILL the calling process when the one that forked it dies; if it
    already died (before the call took effect), ``_exit`` with ``exit_code`` now."""
    if _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        log.warning("parent_death_signal_not_set", error=os.strerror(ctypes.get_errno()))
    if os.getppid() != parent_pid:
        os._exit(exit_code)


def become_subreaper() -> None:
    """Make the calling process adopt its orphaned descendants (logged where unsupported)."""
    if _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        log.warning("subreaper_not_set", error=os.strerror(ctypes.get_errno()))
