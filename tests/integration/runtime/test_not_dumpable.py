"""No other process of the service's user can look into the service or its zygote: both are not
dumpable (``PR_SET_DUMPABLE`` 0), so ``/proc/<pid>/environ``, ``mem`` and ``fd/`` are refused
and ptrace fails, while an ordinary process of that user stays readable to the same reader.

Attack inspiration: issue 17 (without a filesystem layer a promoted tool read
``/proc/<main>/mem``); an owner-approved ``run_shell`` runs with the service user's rights.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .harness import chat_service, parent_of, service_processes

pytestmark = pytest.mark.slow


def unprivileged(*argv: str) -> list[str]:
    """``argv`` run as this user without any capability (root here has CAP_SYS_PTRACE, which
    would read anything): what another process of the service user is."""
    if os.geteuid() != 0:
        return list(argv)
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all", *argv]


def readable(pid: int, what: str) -> bool:
    """Can an unprivileged process of this user open ``/proc/<pid>/<what>``?"""
    probe = f"import os; os.close(os.open('/proc/{pid}/{what}', os.O_RDONLY))"
    return subprocess.run(unprivileged("/usr/bin/python3", "-c", probe)).returncode == 0


@pytest.mark.parametrize("what", ["environ", "mem"])
def test_the_service_and_its_zygote_cannot_be_read_by_another_process_of_the_user(
    tmp_path: Path, what: str
) -> None:
    command = tuple(unprivileged(sys.executable, "-m", "shelldon"))
    control = subprocess.Popen(unprivileged("sleep", "60"))
    try:
        with chat_service(tmp_path / "h", command=command) as proc:
            tree = service_processes(proc.pid)
            (zygote,) = [p for p in tree if parent_of(p) == proc.pid]
            assert readable(control.pid, what)  # the reader can read an ordinary process
            assert not readable(proc.pid, what)
            assert not readable(zygote, what)
    finally:
        control.kill()
        control.wait()
