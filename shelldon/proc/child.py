"""One owner for every child process: start it, watch it, kill it, reap it, release it.

The per-turn worker, the gate's pytest, a RISKY tool's program and python_eval's evaluator are
each a ``Child``, and nothing else in the code base signals or reaps a process:

- started in a process group of its own (``fork``: ``setpgid``; ``spawn``: a new session),
  in its turn's cgroup when one was made (the caller joins or adopts it);
- watched through a pidfd where the kernel has one (``exit_fileno``), so its owner polls for
  the exit with its other descriptors instead of waiting for it;
- asked whether it exited *without* reaping it (``waitid(WNOWAIT)``): until it is reaped its
  pid, hence its group id, cannot be reused, so ``kill`` never reaches a stranger;
- ``kill``: SIGKILL to the cgroup (stragglers that ``setsid``), the group and the pid;
- ``reap``: once it exited, what is left of its group is killed and the exit code collected
  (negative: killed by that signal; ``EXIT_UNKNOWN`` if someone else reaped it);
- its combined output, when captured, read without blocking into a capped ``Output``;
- released in one place: ``close`` (pidfd, output pipe, cgroup), or the context manager (kill,
  reap, close) — ExitStack style, whichever way the owner's code leaves.

Also here, for descendants that leave the group: ``become_subreaper`` (orphans come back to
the caller) and ``sweep_descendants``; and ``die_with_parent`` (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import structlog

from shelldon.proc.sandbox.cgroup import TurnCgroup
from shelldon.proc.sandbox.libc import _prctl

log = structlog.get_logger(__name__)

EXIT_UNKNOWN = 255
"""The exit code of a child that something other than its owner reaped."""

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

SWEEP_ROUNDS = 50
"""A fork loop could keep adding children while the sweep kills them: give up after this many
rounds (the RLIMITs, the cgroup and the turn's deadline remain) rather than spin forever."""

_READ_SIZE = 64 * 1024


class SpawnError(RuntimeError):
    """A child could not be started (no pipe, socketpair or fork); the caller apologizes."""


# ------------------------------------------------------------------ captured output


class Output:
    """A child's output pipe, read without blocking into a buffer that holds at most ``cap``
    bytes: the head only, or (``tail=True``) the head and the tail, what was dropped counted."""

    def __init__(self, fd: int, cap: int, *, tail: bool = False) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.half = max(cap // 2, 256) if tail else cap
        self.keep_tail = tail
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self._dropped = 0
        self.eof = False

    @property
    def dropped(self) -> int:
        """Bytes read but not kept."""
        return self._dropped + max(self.tail_len - self.half, 0)

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def drain(self, max_chunks: int = 64) -> None:
        """Read what the pipe holds now; bounded, so a child that never stops writing (or one
        that escaped and keeps the pipe open) cannot hold its owner in this loop."""
        for _ in range(max_chunks):
            if self.eof:
                return
            try:
                chunk = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                chunk = b""
            if not chunk:
                self.close()
                return
            self.add(chunk)

    def add(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        if not self.keep_tail:
            self._dropped += len(chunk)
            return
        self.tail.append(chunk)
        self.tail_len += len(chunk)
        while self.tail_len - len(self.tail[0]) >= self.half:
            self._dropped += len(self.tail[0])
            self.tail_len -= len(self.tail.popleft())

    def data(self) -> bytes:
        """What was kept: the head, then the last bytes of the tail."""
        return (
            bytes(self.head) + b"".join(self.tail)[-self.half :] if self.tail else bytes(self.head)
        )

    def text(self) -> str:
        """What was kept as text, with a line where bytes were dropped."""
        head = self.head.decode("utf-8", "replace")
        rest = b"".join(self.tail)[-self.half :].decode("utf-8", "replace") if self.tail else ""
        if self.dropped:
            return f"{head}\n…[{self.dropped} bytes of output dropped]…\n{rest}"
        return head + rest

    def close(self) -> None:
        if not self.eof:
            self.eof = True
            with contextlib.suppress(OSError):
                os.close(self.fd)


# ------------------------------------------------------------------ one child


@dataclass(slots=True)
class Child:
    """A process this process started and owns (see the module docstring)."""

    pid: int
    cgroup: TurnCgroup | None = None
    output: Output | None = None
    exit_code: int | None = None
    pidfd: int = -1
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    own_group: bool = True

    @classmethod
    def fork(
        cls,
        body: Callable[[], object],
        *,
        cgroup: TurnCgroup | None = None,
        own_group: bool = True,
    ) -> Child:
        """Fork a child that runs ``body`` and then ``os._exit``s (0 if ``body`` returned, 1 if
        it raised; a body may ``_exit`` with its own code). It gets a process group of its own,
        or with ``own_group=False`` stays in the caller's (a helper of a worker: whoever kills
        the worker's group kills it too). Raises ``SpawnError`` if the fork fails."""
        try:
            pid = os.fork()
        except OSError as exc:
            hint = (
                " (out of processes or memory)" if exc.errno in (errno.EAGAIN, errno.ENOMEM) else ""
            )
            raise SpawnError(f"cannot fork{hint}: {exc}") from exc
        if pid == 0:  # pragma: no cover - the child; its coverage is the parent's assertions
            _child_main(body, own_group)
        if own_group:
            with contextlib.suppress(OSError):
                os.setpgid(pid, pid)  # also from this side: no window before the child's own
        return cls(pid, cgroup=cgroup, pidfd=_pidfd(pid), own_group=own_group)

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        preexec: Callable[[], None] | None = None,
        capture: int | None = None,
        tail: bool = False,
        cgroup: TurnCgroup | None = None,
    ) -> Child:
        """Start ``argv`` in a new session (its own group): stdin on /dev/null, and with
        ``capture`` stdout and stderr into one pipe kept within that many bytes. ``preexec``
        runs in the child before exec (RLIMITs, the sandbox). Raises ``OSError`` if the
        program cannot be started."""
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if capture is not None else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if capture is not None else subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=preexec,  # noqa: PLW1509 - RLIMITs and the sandbox need it
            close_fds=True,
        )
        output = None
        if capture is not None:
            assert proc.stdout is not None
            # The pipe is ours from here: Popen's file object must not close it behind us.
            output = Output(os.dup(proc.stdout.fileno()), capture, tail=tail)
            proc.stdout.close()
            proc.stdout = None
        return cls(proc.pid, cgroup=cgroup, output=output, pidfd=_pidfd(proc.pid), popen=proc)

    def exit_fileno(self) -> int:
        """A descriptor that becomes readable once the child exited (its pidfd); -1 where the
        kernel has none (the owner then polls ``exited``)."""
        return self.pidfd

    def exited(self) -> bool:
        """Has it exited? Asked without reaping it, so its group id stays safe to signal."""
        if self.exit_code is not None:
            return True
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def wait_exit(self, timeout: float) -> bool:
        """Whether it exited within ``timeout`` s (on its pidfd where there is one)."""
        until = time.monotonic() + timeout
        while not self.exited():
            left = until - time.monotonic()
            if left <= 0:
                return False
            if self.pidfd >= 0:
                readable(self.pidfd, left)
            else:
                time.sleep(min(0.002, left))
        return True

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the child's group and the child (with SIGKILL its cgroup too: stragglers
        that left the group die as well). Never reaches a stranger: after the reap, only the
        cgroup is signalled."""
        if self.cgroup is not None and sig == signal.SIGKILL:
            self.cgroup.kill()
        if self.exit_code is not None:
            return
        for target in (-self.pid, self.pid) if self.own_group else (self.pid,):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(target, sig)

    def reap(self, block: bool = False) -> int | None:
        """Its exit code, or None while it runs and ``block`` is False. On the exit, whatever
        is left of its process group is killed first (its group id is still ours then)."""
        if self.exit_code is not None:
            return self.exit_code
        try:
            flags = os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG)
            exited = os.waitid(os.P_PID, self.pid, flags)
        except ChildProcessError:
            exited = None
        except InterruptedError:
            return self.reap(block=True) if block else None
        if exited is not None and self.own_group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        code = self._collect(block)
        if code is None:
            return None
        self.exit_code = code
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        return code

    def _collect(self, block: bool) -> int | None:
        if self.popen is not None:
            try:
                return self.popen.wait() if block else self.popen.poll()
            except ChildProcessError:
                return EXIT_UNKNOWN
        while True:
            try:
                pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
            except InterruptedError:
                continue
            except ChildProcessError:
                # Someone else reaped it (a stray waitpid(-1)); it is gone either way.
                log.warning("child_already_reaped", pid=self.pid)
                return EXIT_UNKNOWN
            return None if pid == 0 else os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        """Release what it holds: its pidfd, its output pipe, its cgroup (killed, removed)."""
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        if self.output is not None:
            self.output.close()
        if self.cgroup is not None:
            self.cgroup.close()
            self.cgroup = None

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        self.reap(block=True)
        self.close()


def _child_main(body: Callable[[], object], own_group: bool) -> NoReturn:
    code = 1
    try:
        if own_group:
            os.setpgid(0, 0)
        body()
        code = 0
    finally:
        os._exit(code)


def _pidfd(pid: int) -> int:
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return -1


def readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` is readable within ``timeout`` s (0: now)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0, int(timeout * 1000)) if timeout > 0 else 0))


# ------------------------------------------------------------------ the process's own ties


def die_with_parent(parent_pid: int, exit_code: int) -> None:
    """Ask the kernel to SIGKILL the calling process when the one that forked it dies; if it
    already died (before the call took effect), ``_exit`` with ``exit_code`` now."""
    with contextlib.suppress(OSError, AttributeError):
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(exit_code)


def become_subreaper() -> bool:
    """Make the calling process adopt its orphaned descendants; False where unsupported."""
    try:
        if _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            log.warning("subreaper_not_set")
            return False
    except (OSError, AttributeError) as exc:
        log.warning("subreaper_not_set", error=str(exc))
        return False
    return True


# ------------------------------------------------------------------ descendants


@dataclass(frozen=True, slots=True)
class ProcEntry:
    """One process: pid, parent, and start time (which tells a reused pid apart)."""

    pid: int
    ppid: int
    start: int


def _read_entry(pid: int) -> ProcEntry | None:
    """One process's line of the table, or None if it is gone."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        raw = os.read(fd, 4096)  # os.read, not open(): the table is read twice per run
    except OSError:
        return None
    finally:
        os.close(fd)
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
    try:
        fd = os.open(f"/proc/{proc_pid}/status", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        raw = os.read(fd, 1 << 14)
    except OSError:
        return None
    finally:
        os.close(fd)
    for line in raw.split(b"\n"):
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
    kids = _children_in_proc()
    return None if kids is None else _to_own_pids(kids)


def _children_in_proc() -> set[int] | None:
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
    return kids


def snapshot() -> frozenset[int]:
    """This process's children now (pids): what a sweep leaves alone. Empty where neither
    list can be read (a confined child without the children file): everything new is swept."""
    kids = own_children()
    if kids is not None:
        return frozenset(kids)
    me = _self_in_proc()
    if me is None or me != os.getpid():
        return frozenset()
    try:
        return frozenset(e.pid for e in descendants(me, process_table()))
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
    try:
        pidfd = os.pidfd_open(entry.pid)
    except (ProcessLookupError, AttributeError, OSError):
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
