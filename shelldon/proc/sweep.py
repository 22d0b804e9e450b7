"""Descendants that left their process group: read ``/proc`` to find them, kill and reap them
(``sweep_descendants``, for a subreaper), never a reused pid."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from shelldon.proc.sandbox.libc import _pidfd

log = structlog.get_logger(__name__)

SWEEP_ROUNDS = 50
"""A fork loop could keep adding children while the sweep kills them: give up after this many
rounds (the RLIMITs, the cgroup and the turn's deadline remain) rather than spin forever."""


@dataclass(frozen=True, slots=True)
class ProcEntry:
    """One process: pid, parent, and start time (which tells a reused pid apart)."""

    pid: int
    ppid: int
    start: int


def _read_proc(path: str, size: int) -> bytes | None:
    """A ``/proc`` file's first ``size`` bytes, or None if it is gone or unreadable (os.read,
    not open(): the table is read twice per run)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_entry(pid: int) -> ProcEntry | None:
    """One process's line of the table, or None if it is gone."""
    raw = _read_proc(f"/proc/{pid}/stat", 4096)
    if raw is None:
        return None
    # comm may hold spaces and parentheses: the fields start after the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    return ProcEntry(pid, int(fields[1]), int(fields[19]))


def process_table() -> dict[int, ProcEntry]:
    """Every visible process from ``/proc/*/stat``; processes that vanish mid-read are skipped."""
    table: dict[int, ProcEntry] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            entry = _read_entry(int(name))
            if entry is not None:
                table[entry.pid] = entry
    return table


def descendants(root: int, table: Mapping[int, ProcEntry]) -> list[ProcEntry]:
    """All processes below ``root`` in ``table``, parents before children."""
    children: dict[int, list[ProcEntry]] = {}
    for entry in table.values():
        children.setdefault(entry.ppid, []).append(entry)
    found: list[ProcEntry] = []
    queue = [root]
    while queue:
        for entry in children.get(queue.pop(0), []):
            found.append(entry)
            queue.append(entry.pid)
    return found


def _self_in_proc() -> int | None:
    """This process's pid as ``/proc`` numbers it (None if unreadable). It differs from
    ``os.getpid()`` inside a PID namespace of its own under the host's ``/proc``."""
    try:
        return int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        return None


def _nspids(proc_pid: int | str) -> list[int] | None:
    """A process's pid in each PID namespace it is in, outermost first (``NSpid``)."""
    raw = _read_proc(f"/proc/{proc_pid}/status", 1 << 14)
    for line in (raw or b"").split(b"\n"):
        if line.startswith(b"NSpid:"):
            return [int(word) for word in line.split()[1:]]
    return None


def _to_own_pids(proc_pids: set[int]) -> set[int] | None:
    """``proc_pids``, numbered by ``/proc``, as this process's own PID namespace numbers them;
    None when that cannot be known (their ``/proc`` entries are not readable here): then no
    pid may be signalled, lest a number mean another process here."""
    me = _self_in_proc()
    if me is None:
        return None
    if me == os.getpid():
        return proc_pids
    mine = _nspids("self")
    if not mine:
        return None
    level = len(mine) - 1
    own: set[int] = set()
    for pid in proc_pids:
        theirs = _nspids(pid)
        if theirs is None:
            if os.path.exists(f"/proc/{pid}"):
                return None  # there, but not readable: its number here is unknown
            continue  # gone
        if len(theirs) > level:
            own.add(theirs[level])
    return own


def own_children() -> set[int] | None:
    """This process's direct children (every thread's), from ``/proc/self/task/*/children``,
    which a confined child can still read (the rest of ``/proc`` it cannot), numbered in its
    own PID namespace; None where the kernel does not list them or the numbers cannot be
    translated."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    kids: set[int] = set()
    for tid in tids:
        try:
            fd = os.open(f"/proc/self/task/{tid}/children", os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # that thread just ended
        except OSError:
            return None
        try:
            kids.update(int(word) for word in os.read(fd, 1 << 16).split())
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
    return _to_own_pids(kids)


def snapshot() -> frozenset[int]:
    """This process's children now (pids): what a sweep leaves alone. Empty where neither
    list can be read (a confined child without the children file): everything new is swept."""
    kids = own_children()
    if kids is not None:
        return frozenset(kids)
    if _self_in_proc() != os.getpid():
        return frozenset()
    try:
        return frozenset(e.pid for e in descendants(os.getpid(), process_table()))
    except OSError:
        return frozenset()


def sweep_descendants(before: frozenset[int]) -> int:
    """SIGKILL and reap every descendant of this process not in ``before``; how many.

    The caller is a subreaper: each descendant whose parent dies becomes its child. So killing
    the direct children round after round reaches every generation (each reaped by pid, never
    ``waitpid(-1)``, which would steal other owners' children). Where the children list is not
    readable, the whole process table is walked instead; where neither is, nothing is swept
    (the turn's cgroup stays the backstop) and that is logged.
    """
    killed: set[int] = set()
    for _round in range(SWEEP_ROUNDS):
        kids = own_children()
        if kids is None:
            return len(killed) + _sweep_by_table(before)
        strays = kids - before
        if not strays:
            return len(killed)
        for pid in strays:
            # A child not yet reaped: its pid cannot have been reused, so this reaches it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for pid in strays:
            _reap_stray(pid, timeout_s=1.0)
        killed |= strays
    log.warning("sweep_gave_up", rounds=SWEEP_ROUNDS, killed=len(killed))
    return len(killed)


def _sweep_by_table(before: frozenset[int]) -> int:
    me = os.getpid()
    if _self_in_proc() != me:
        # /proc numbers another PID namespace's processes: a number read there could name
        # another process here. The PID namespace's end is the sweep (everything in it dies).
        log.info("sweep_left_to_the_pid_namespace", why="/proc numbers another namespace")
        return 0
    killed: set[tuple[int, int]] = set()
    for _round in range(SWEEP_ROUNDS):
        try:
            table = process_table()
        except OSError as exc:
            log.warning("sweep_impossible", error=str(exc))
            return len(killed)
        strays = [e for e in descendants(me, table) if e.pid not in before]
        if not strays:
            return len(killed)
        for entry in strays:
            _kill_exactly(entry)
            killed.add((entry.pid, entry.start))
        for entry in strays:
            if entry.ppid == me:
                _reap_stray(entry.pid, timeout_s=1.0)
    log.warning("sweep_gave_up", rounds=SWEEP_ROUNDS, killed=len(killed))
    return len(killed)


def _kill_exactly(entry: ProcEntry) -> None:
    """SIGKILL the process ``entry`` describes and no other, even if its pid was reused since the
    table was read: a pidfd pins one process, and its start time must still match."""
    pidfd = _pidfd(entry.pid)
    if pidfd < 0:
        return
    try:
        current = _read_entry(entry.pid)
        if current is not None and current.start == entry.start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)


def _reap_stray(pid: int, *, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done or time.monotonic() > deadline:
            return
        time.sleep(0.002)
