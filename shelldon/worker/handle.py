"""The parent's side of one worker it forked: the channel end, the deadline, the process."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from shelldon.contracts import MAX_BLOB_BYTES
from shelldon.proc import sandbox
from shelldon.proc.child import EXIT_UNKNOWN, Child
from shelldon.worker.channel import HEADER, FrameError, FrameReader, send_frame

log = structlog.get_logger(__name__)

EXIT_OK = 0
EXIT_CRASH = 1
EXIT_CHANNEL = 3
"""Worker exit codes: Result sent; crashed (apology attempted); Result could not be sent.
(``EXIT_UNKNOWN``, from ``shelldon.proc.child``: something other than its handle reaped it.)"""

_READ_CHUNK = 1 << 16
_READ_BUDGET = 2 * (MAX_BLOB_BYTES + HEADER.size)


class Worker(Protocol):
    """One worker as the TurnActor drives it, wherever it was forked: ``WorkerHandle`` (by this
    process) or ``shelldon.worker.remote.ZygoteWorkerHandle`` (by the zygote)."""

    pid: int
    turn_id: str
    deadline: float
    eof: bool

    @property
    def cgroup_path(self) -> str | None: ...
    def fileno(self) -> int: ...
    def exit_fileno(self) -> int: ...
    def send(self, obj: Any) -> None: ...
    def read_frames(self) -> list[Any]: ...
    def kill(self) -> None: ...
    def reap(self, block: bool = False) -> int | None: ...
    def close(self) -> None: ...


@dataclass(slots=True)
class WorkerChannel:
    """The parent's non-blocking end of one worker's channel, and the turn's deadline."""

    pid: int
    sock: socket.socket
    deadline: float
    turn_id: str
    reader: FrameReader = field(default_factory=FrameReader)
    eof: bool = False

    def fileno(self) -> int:
        """The channel's descriptor (what the TurnActor watches for readability)."""
        return self.sock.fileno()

    def send(self, obj: Any) -> None:
        """Answer the worker with one frame (Completion or JobFailed); raises ``FrameError``."""
        send_frame(self.sock, obj, self.deadline)

    def read_frames(self) -> list[Any]:
        """Every whole frame readable now, without blocking; sets ``eof`` when the child closed.
        ``FrameError`` on garbage from the child or a frame cut off by EOF."""
        frames: list[Any] = []
        budget = _READ_BUDGET
        # A bounded read: a worker flooding the channel cannot pin its reader in this loop.
        while not self.eof and budget > 0:
            budget -= _READ_CHUNK
            try:
                data = self.sock.recv(_READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                raise FrameError(f"cannot read from worker {self.pid}: {exc}") from exc
            if not data:
                self.eof = True
                if self.reader.pending:
                    raise FrameError(f"worker {self.pid} closed the channel inside a frame")
                break
            frames.extend(self.reader.feed(data))
        return frames


@dataclass(slots=True)
class WorkerHandle(WorkerChannel):
    """A worker this process forked: the channel and the process itself (``proc``, a
    ``Child``, through which kill, reap and close go; all three idempotent, and all three on
    leaving it as a context manager)."""

    exit_code: int | None = None
    cgroup: sandbox.TurnCgroup | None = None
    proc: Child | None = None

    @property
    def cgroup_path(self) -> str | None:
        """The turn's cgroup directory, if it has one."""
        return str(self.cgroup.path) if self.cgroup is not None else None

    def exit_fileno(self) -> int:
        """A descriptor that becomes readable once the worker has exited (a pidfd), so its
        owner can watch for the exit instead of waiting; -1 where the kernel has none."""
        return self.proc.exit_fileno() if self.proc is not None else -1

    def kill(self) -> None:
        """SIGKILL the worker, its process group and its cgroup (never a recycled pid)."""
        if self.proc is not None:
            self.proc.kill()

    def reap(self, block: bool = False) -> int | None:
        """Collect the worker's exit: its exit code (negative: killed by that signal), or None
        while it still runs and ``block`` is False."""
        if self.exit_code is None and self.proc is not None:
            self.exit_code = self.proc.reap(block)
            if self.exit_code == EXIT_UNKNOWN:
                log.warning("worker_already_reaped", pid=self.pid, turn_id=self.turn_id)
        return self.exit_code

    def close(self) -> None:
        """Close the parent's end of the channel; kill and remove the turn's cgroup, if any."""
        self.sock.close()
        if self.proc is not None:
            self.proc.close()

    def __enter__(self) -> WorkerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        self.reap(block=True)
        self.close()
