"""Who may look into a process: ``PR_SET_DUMPABLE``.

A process that is not dumpable cannot be ptraced, and its ``/proc/<pid>/mem``, ``environ``,
``fd/`` and ``maps`` cannot be opened, by any other process of the same user without
``CAP_SYS_PTRACE``: an owner-approved shell command, or code that got out of a worker, cannot
read the bot token and the API key out of the service's memory, nor drive the zygote. Set once
in the main process before the zygote is forked (fork keeps it; exec of a normal binary resets
it, so a gate's pytest is dumpable again, and holds no secret).

A process that is not dumpable also cannot write its own ``/proc/self/uid_map`` (those files
then belong to root): the user-namespace layer turns it back on for those two writes
(``userns.py``), and off again.
"""

from __future__ import annotations

from shelldon.core.sandbox.libc import _check, _prctl

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
