"""Pids as the host sees them, from inside a worker or a gate run.

A worker and a gate run live in a PID namespace of their own (``sandbox.pidns``): there
``os.getpid()`` is small (the worker is 1) while the tests outside look processes up by the
host's numbers. ``/proc`` inside is the host's, so it tells both.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def host_pid() -> int:
    """The calling process's pid as the host (and ``/proc``) numbers it."""
    return int(os.readlink("/proc/self"))


def host_ppid() -> int:
    """The calling process's parent's pid as the host numbers it (0: none visible)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("PPid:"):
                return int(line.split()[1])
    raise RuntimeError("no PPid line in /proc/self/status")


def in_own_pid_namespace(pid: int) -> bool:
    """Whether ``pid`` lives in a PID namespace other than the caller's."""
    return os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")


def made_pid_namespace(pid: int) -> bool:
    """Whether ``pid`` is a stub that gave its child a PID namespace of its own. (Between the
    ``unshare`` and the fork the new namespace has no process yet and its link reads ENOENT.)"""
    try:
        mine = os.readlink(f"/proc/{pid}/ns/pid")
        return os.readlink(f"/proc/{pid}/ns/pid_for_children") != mine
    except FileNotFoundError:
        if not os.path.exists(f"/proc/{pid}"):
            raise
        return True


def inner(pid: int, timeout: float = 3.0, *, pidns: bool | None = None) -> int:
    """The process that does the work of the child ``pid`` a parent started: ``pid`` itself,
    or where it makes a PID namespace (``pidns``; default: wherever this machine allows one,
    as a default sandbox plan does) its one child inside, once it is there."""
    if pidns is None:
        from shelldon.proc import sandbox

        pidns = sandbox.pidns_available()
    if not pidns:
        return pid
    until = time.monotonic() + timeout
    while True:
        if made_pid_namespace(pid):
            kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if kids:
                return int(kids[0])
        if time.monotonic() > until:
            raise TimeoutError(f"{pid} made no PID namespace with a child in it")
        time.sleep(0.002)


def host_children() -> set[int]:
    """The calling process's children, numbered as the host numbers them."""
    kids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        kids.update(int(w) for w in (task / "children").read_text().split())
    return kids


def popen_host_pid(argv: list[str], **kwargs: object) -> int:
    """Start ``argv`` (``subprocess.Popen``) and return its pid as the host numbers it."""
    import subprocess

    before = host_children()
    subprocess.Popen(argv, **kwargs)  # type: ignore[call-overload]
    (new,) = host_children() - before
    return new


def holders(path: Path) -> list[int]:
    """Pids (as the host numbers them) of the processes that hold ``path`` open: how a test
    finds a process a worker or gate run started, whose own pid means nothing outside."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{name}/fd/{fd}") == str(path):
                    found.append(int(name))
                    break
            except OSError:
                continue
    return found


def running(*argv: str) -> list[int]:
    """Pids (host numbering) of the live processes whose command line is exactly ``argv``."""
    wanted = b"\0".join(a.encode() for a in argv) + b"\0"
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{name}/cmdline").read_bytes() == wanted:
                found.append(int(name))
        except OSError:
            continue
    return found
