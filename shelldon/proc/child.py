"""One owner for every child process: start it, watch it, kill it, reap it, release it.

The per-turn worker, the gate's pytest, a RISKY tool's program and python_eval's evaluator are
each a ``Child``, and nothing else signals or reaps a process. Whether it exited is asked
without reaping it (``waitid(WNOWAIT)``): until it is reaped its pid, hence its group id,
cannot be reused, so ``kill`` (the cgroup, for stragglers that ``setsid``; the group; the pid)
never reaches a stranger. The context manager kills, reaps and closes (pidfd, output pipe,
cgroup) whichever way the owner's code leaves, ExitStack style.

Descendants that leave the group: ``shelldon.proc.sweep``; the calling process's own ties
(``die_with_parent``, ``become_subreaper``): ``shelldon.proc.ties``.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import structlog

from shelldon.proc.output import Output
from shelldon.proc.sandbox.cgroup import TurnCgroup
from shelldon.proc.sandbox.libc import _pidfd

log = structlog.get_logger(__name__)

EXIT_UNKNOWN = 255
"""The exit code of a child that something other than its owner reaped."""


class SpawnError(RuntimeError):
    """A child could not be started (no pipe, socketpair or fork); the caller apologizes."""


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
        kernel has none. The zygote watches a gate's ``Child`` and a ``WorkerHandle`` by it."""
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

    def pump(
        self,
        outputs: Sequence[Output],
        deadline: float | None = None,
        *,
        until_full: Output | None = None,
    ) -> bool:
        """Read ``outputs`` until the child exits (True, after a last read of what is left), or
        ``deadline`` (``time.monotonic()``) passes or ``until_full`` overflows its cap (False).
        Its exit, not EOF, ends the wait: a process it left behind may hold a copy of a pipe."""
        poller = select.poll()
        for output in outputs:
            if not output.eof:
                poller.register(output.fd, select.POLLIN)
        if self.pidfd >= 0:
            poller.register(self.pidfd, select.POLLIN)
        while True:
            exited = self.exited()
            for output in outputs:
                if not output.eof:
                    output.drain()
                    if output.eof:
                        poller.unregister(output.fd)
            if exited:
                return True
            if until_full is not None and until_full.truncated:
                return False
            timeout_ms = None
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                timeout_ms = max(1, math.ceil(left * 1000))
            if self.pidfd < 0:  # without a pidfd the exit is noticed within 50 ms
                timeout_ms = 50 if timeout_ms is None else min(timeout_ms, 50)
            poller.poll(timeout_ms)

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
        """Its exit code (negative: killed by that signal), or None while it runs and ``block``
        is False. On the exit, what is left of its group is killed first (its id is still ours)."""
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


def readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` is readable within ``timeout`` s (0: now)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0, int(timeout * 1000)) if timeout > 0 else 0))
