"""The service and its zygote are not dumpable, and every worker and gate run they fork inherits
that: the user-namespace layer must still build (a process that is not dumpable cannot write its
own ``uid_map``, whose owner then becomes root) and the process must stay not dumpable after.

Found while making the service not dumpable: as an ordinary user (the Pi's ``shelldon``),
``unshare`` + ``uid_map`` failed with EACCES, so on a kernel without Landlock every turn would
have run without a filesystem layer.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from shelldon.proc import sandbox
from shelldon.proc.sandbox.userns import _userns_restrict

NOBODY = 65534


def in_child(body_ok: Callable[[], bool]) -> int:
    """Run ``body_ok`` in a forked child; 0 when it returned True."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        code = 1
        try:
            code = 0 if body_ok() else 2
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming another user needs root")
@pytest.mark.skipif(not sandbox.userns_available(), reason="no unprivileged user namespaces")
def test_the_namespace_layer_builds_in_a_process_that_is_not_dumpable() -> None:
    def confine_as_an_ordinary_user() -> bool:
        sandbox.forbid_dumps()
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        _userns_restrict(("/usr",), (), network=False)
        # Confined (nothing but /usr and /proc is there), and still not dumpable.
        return not os.path.exists("/etc/passwd") and not sandbox.dumpable()

    assert in_child(confine_as_an_ordinary_user) == 0


def test_forbidding_dumps_is_inherited_by_a_fork() -> None:
    def forked_twice() -> bool:
        sandbox.forbid_dumps()
        return in_child(lambda: not sandbox.dumpable()) == 0

    assert in_child(forked_twice) == 0
    assert sandbox.dumpable()  # this process was never touched
