"""A PID namespace of its own for each worker and each gate run.

The same uid is all it takes to ``kill(2)``, renice, ``prlimit`` or ``sched_setaffinity``
another process: without this a self-coded tool could SIGSTOP the zygote (Raspberry Pi OS has
no Landlock, and Landlock scopes signals only from ABI 6, kernel 6.12, and never ``prlimit``).
Inside a PID namespace of its own a process cannot name anything outside: every pid-taking
syscall answers ESRCH, and ``pidfd_send_signal`` refuses a pidfd (``/proc/<pid>``) of a process
outside. When the namespace's first process ends, the kernel SIGKILLs every process left in it:
``setsid`` daemons, double forks, ``nohup`` — the sweep that needs no delegated cgroup.

An unprivileged process gets one together with a user namespace that maps only its own ids
(root needs none): ``unshare(CLONE_NEWUSER | CLONE_NEWPID)`` puts its *next* child in the new
namespace, as pid 1. So ``enter_pid_namespace`` forks once: the child goes on confined; the
caller stays outside as a stub that holds nothing (every descriptor closed, every signal
blocked), waits for it and leaves the way it left (the same exit code or signal), so whoever
owns the caller's pid sees the exit it always saw. Killing the stub kills the namespace: its
pid 1 has ``PR_SET_PDEATHSIG``.
"""

from __future__ import annotations

import _signal
import contextlib
import functools
import os
import select
import signal
from typing import NoReturn

from shelldon.proc.sandbox.dumpable import set_dumpable
from shelldon.proc.sandbox.libc import _PR_SET_PDEATHSIG, _pidfd, _prctl
from shelldon.proc.sandbox.userns import _unshare, enter_user_namespace, probe_in_fork

_CLONE_NEWPID = 0x20000000


def enter_pid_namespace(*, orphan_exit: int) -> None:
    """Go on as pid 1 of a new PID namespace (see the module docstring); the process that
    called this never returns from it. If the stub is already gone when the new process looks,
    it ``_exit``s with ``orphan_exit``. Raises ``OSError`` when the namespaces or the fork
    cannot be made (the caller is then still in the old PID namespace)."""
    _unshare_pid()
    watch = _pidfd(os.getpid())
    try:
        pid = os.fork()
    except OSError:
        if watch >= 0:
            os.close(watch)
        raise
    if pid != 0:
        _stub(pid)
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if watch >= 0:
        # The stub died before the death signal was armed: nobody outside would notice us.
        poller = select.poll()
        poller.register(watch, select.POLLIN)
        gone = bool(poller.poll(0))
        os.close(watch)
        if gone:
            os._exit(orphan_exit)


def _unshare_pid() -> None:
    # Root (a `sudo shelldon restore` that gates tools) may make the PID namespace alone: a
    # user namespace would map only root, and the files the service user owns would be out of
    # its reach. Everyone else needs the user namespace to be allowed one.
    if os.geteuid() == 0 and _unshare(_CLONE_NEWPID) == 0:
        return
    enter_user_namespace(_CLONE_NEWPID, "unshare(user+pid)")


def _stub(inner: int) -> NoReturn:
    code = 1
    try:
        # Blocked, so no handler the caller inherited runs here and waitpid is never cut short.
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        os.closerange(0, os.sysconf("SC_OPEN_MAX"))
        # Its memory is a copy of its forker's (the service's, for a gate run): nothing inside
        # the namespace may open it, whatever it inherited.
        set_dumpable(False)
        while True:
            try:
                _, status = os.waitpid(inner, 0)
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                os._exit(code)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            with contextlib.suppress(OSError, ValueError):
                _signal.signal(sig, _signal.SIG_DFL)
            with contextlib.suppress(OSError, ValueError):
                signal.pthread_sigmask(signal.SIG_UNBLOCK, (sig,))
                os.kill(os.getpid(), sig)
            code = 128 + sig
        else:
            code = os.waitstatus_to_exitcode(status)
    finally:
        os._exit(code)


@functools.cache
def pidns_available() -> bool:
    """Can this process give a child a PID namespace of its own? Probed once, in a fork that
    does exactly what a worker does (a unit's ``RestrictNamespaces=`` may forbid it)."""

    def attempt() -> bool:
        enter_pid_namespace(orphan_exit=1)
        return os.getpid() == 1  # only the new pid 1 gets here; its stub mirrors its exit

    return probe_in_fork(attempt)
