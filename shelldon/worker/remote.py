"""Children the zygote forked, as the service holds them: a turn's worker
(``ZygoteWorkerHandle``) and a gate's pytest (``ZygoteGate``), each first a ``PendingSpawn``
(the reply on a socket of its own, watched like any descriptor). Each exit arrives on an exit
pipe the zygote writes once it has reaped the child; kill and close are one-way messages."""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, NoReturn, TypeVar, cast

import msgpack
import structlog

from shelldon.proc import sandbox
from shelldon.proc.child import EXIT_UNKNOWN, SpawnError, readable
from shelldon.proc.output import Output
from shelldon.worker.handle import WorkerChannel
from shelldon.worker.zygote_server import EXIT_CODE, MAX_MESSAGE

if TYPE_CHECKING:
    from shelldon.worker.zygote import Zygote

log = structlog.get_logger(__name__)

REAP_BLOCK_S = 10.0
"""Longest a blocking ``reap`` waits for the zygote to report an exit before it declares the
zygote broken (only tests and benchmarks block: actors watch the exit pipe)."""


class ZygoteError(SpawnError):
    """The zygote is dead, timed out or broke the protocol: no worker can be started."""


@dataclass(slots=True)
class ZygoteWorkerHandle(WorkerChannel):
    """A worker forked by the zygote, as the TurnActor sees it: the channel end received from
    the zygote, and ``exit_fileno``, the exit pipe (readable once the zygote reaped the worker,
    or died). ``kill`` and ``close`` are requests to the zygote, the worker's parent. None of
    them raises, and only ``reap(block=True)`` waits: if the zygote is gone, its workers died
    with it (PDEATHSIG), so the turn's cgroup is swept and the exit is ``EXIT_UNKNOWN``."""

    exit_code: int | None = None
    zygote: Zygote | None = None
    cgroup_path: str | None = None
    released: bool = False
    exits: int = -1

    def exit_fileno(self) -> int:
        return self.exits

    def kill(self) -> None:
        """SIGKILL the worker (cgroup, process group, pid) through the zygote."""
        if self.released or self.exit_code is not None or self.zygote is None:
            return
        try:
            self.zygote.post({"op": "kill", "pid": self.pid})
        except ZygoteError as exc:
            log.warning("zygote_kill_failed", pid=self.pid, turn_id=self.turn_id, error=str(exc))
            self._orphaned()

    def reap(self, block: bool = False) -> int | None:
        """The worker's exit code (negative: killed by that signal), or None while it runs and
        ``block`` is False."""
        if self.exit_code is not None:
            return self.exit_code
        if self.exits < 0:
            self.exit_code = EXIT_UNKNOWN
            return self.exit_code
        done, code = read_exit(self.exits, REAP_BLOCK_S if block else 0.0)
        if not done:
            if not block:
                return None
            if self.zygote is not None:
                self.zygote.abandon(f"no exit reported for worker {self.pid} in {REAP_BLOCK_S} s")
            self.exit_code = EXIT_UNKNOWN
            return self.exit_code
        if code is None:  # EOF without a code: the zygote died, and its workers with it
            self._orphaned()
        self.exit_code = EXIT_UNKNOWN if code is None else code
        return self.exit_code

    def close(self) -> None:
        """Close the channel and the exit pipe; a worker still running is killed by the zygote
        (which reaps it and removes the turn's cgroup in its own time)."""
        self.sock.close()
        if self.released:
            return
        self.released = True
        self.reap(block=False)
        if self.exits >= 0:
            os.close(self.exits)
            self.exits = -1
        zygote = self.zygote
        if zygote is None:
            return
        if self.exit_code is None:
            try:
                zygote.post({"op": "close", "pid": self.pid})
            except ZygoteError as exc:
                log.warning("zygote_close_failed", pid=self.pid, error=str(exc))
                self._orphaned()
                self.exit_code = EXIT_UNKNOWN
        zygote.forget(self.pid)

    def _orphaned(self) -> None:
        """The zygote is gone (it was killed): the worker died by PDEATHSIG; whatever its
        tools left in the turn's cgroup goes too."""
        if self.cgroup_path is not None:
            sandbox.TurnCgroup(Path(self.cgroup_path)).close()

    def __enter__(self) -> ZygoteWorkerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        self.reap(block=True)
        self.close()


def read_exit(exits: int, timeout: float) -> tuple[bool, int | None]:
    """Whether the zygote reported on exit pipe ``exits`` within ``timeout`` s, and the code:
    None when the pipe ended without one (the zygote died)."""
    if not readable(exits, timeout):
        return False, None
    try:
        data = os.read(exits, EXIT_CODE.size)
    except OSError:
        data = b""
    return True, EXIT_CODE.unpack(data)[0] if len(data) == EXIT_CODE.size else None


@dataclass(slots=True, eq=False)
class ZygoteGate:
    """A gate's pytest the zygote forked, as ``GateRun`` watches it: ``output`` reads the pipe
    the zygote handed over, the exit comes on the exit pipe; kill and close are requests to
    the zygote. Only ``reap(block=True)`` waits (bounded, as a worker's)."""

    zygote: Zygote
    pid: int
    output: Output | None
    exits: int
    cgroup: str | None
    exit_code: int | None = None

    def exited(self) -> bool:
        """Whether the zygote reported the exit (it reaped pytest and swept its cgroup)."""
        return self.reap(block=False) is not None

    def kill(self) -> None:
        """SIGKILL pytest (cgroup, group, pid) through the zygote."""
        if self.exit_code is None:
            try:
                self.zygote.post({"op": "kill", "pid": self.pid})
            except ZygoteError as exc:
                log.info("zygote_gate_kill_failed", pid=self.pid, error=str(exc))

    def reap(self, block: bool = False) -> int | None:
        """Its exit code, or None while it runs and ``block`` is False."""
        if self.exit_code is not None or self.exits < 0:
            return self.exit_code
        done, code = read_exit(self.exits, REAP_BLOCK_S if block else 0.0)
        if not done and not block:
            return None
        if not done:
            self.zygote.abandon(f"no exit reported for gate {self.pid} in {REAP_BLOCK_S} s")
        if code is None and self.cgroup is not None:  # the zygote died: nothing reaps there
            sandbox.TurnCgroup(Path(self.cgroup)).close()
        self.exit_code = EXIT_UNKNOWN if code is None else code
        os.close(self.exits)
        self.exits = -1
        self.zygote.forget(self.pid)
        return self.exit_code

    def close(self) -> None:
        """Close the output and exit pipes; one still running is killed by the zygote."""
        if self.output is not None:
            self.output.close()
        if self.exits < 0:
            return
        if self.reap(block=False) is None:
            try:
                self.zygote.post({"op": "close", "pid": self.pid})
            except ZygoteError as exc:
                log.info("zygote_gate_close_failed", pid=self.pid, error=str(exc))
            os.close(self.exits)
            self.exits = -1
            self.zygote.forget(self.pid)


Spawned = TypeVar("Spawned", bound="ZygoteWorkerHandle | ZygoteGate")


class PendingSpawn(Generic[Spawned]):
    """A worker or gate asked of the zygote, until its reply arrives on ``fileno()``: its
    channel (or output) and exit pipe, as descriptors. ``poll`` never waits."""

    def __init__(
        self, zygote: Zygote, sock: socket.socket, *, turn_id: str = "", gate_cap: int = 0
    ) -> None:
        self.zygote = zygote
        self.sock = sock
        # Kept after the socket is closed: the number its watcher unwatches.
        self.fd = sock.fileno()
        self.turn_id = turn_id
        self.gate_cap = gate_cap

    def fileno(self) -> int:
        return self.fd

    def poll(self) -> Spawned | None:
        """The child once the zygote answered; None until then. SpawnError: refused;
        ZygoteError: the zygote died or broke the protocol (and was killed)."""
        try:
            data, fds, flags, _ = socket.recv_fds(self.sock, MAX_MESSAGE, 2)
        except BlockingIOError:
            return None
        except OSError as exc:
            self._broken(f"its reply failed: {exc}")
        self.close()
        try:
            reply = msgpack.unpackb(data) if data else None
        except (ValueError, msgpack.UnpackException):
            reply = None
        if not isinstance(reply, dict) or flags & socket.MSG_TRUNC:
            self._broken("it did not answer" if not data else "its reply is malformed", fds)
        if not reply.get("ok"):
            _close_all(fds)
            raise SpawnError(f"the zygote refused: {reply.get('error')}")
        pid, cgroup = reply.get("pid"), reply.get("cgroup")
        deadline = reply.get("deadline", 0.0) if not self.gate_cap else 0.0
        if not isinstance(pid, int) or not isinstance(cgroup, str | None) or len(fds) > 2:
            self._broken("its reply is malformed", fds)
        if not isinstance(deadline, float):
            self._broken("its reply is malformed", fds)
        if len(fds) < 2:
            # The kernel dropped a descriptor (this process is out of them): the child has no
            # one to talk to; the zygote ends it, and this turn or gate cannot start.
            _close_all(fds)
            with contextlib.suppress(ZygoteError):
                self.zygote.post({"op": "close", "pid": pid})
            raise SpawnError("the child's descriptors did not arrive (out of descriptors?)")
        self.zygote.track(pid, cgroup)
        os.set_blocking(fds[1], False)
        if self.gate_cap:
            output = Output(fds[0], self.gate_cap, tail=True)
            return cast(Spawned, ZygoteGate(self.zygote, pid, output, fds[1], cgroup))
        channel = socket.socket(fileno=fds[0])
        channel.setblocking(False)
        handle = ZygoteWorkerHandle(
            pid=pid,
            sock=channel,
            deadline=deadline,
            turn_id=self.turn_id,
            zygote=self.zygote,
            cgroup_path=cgroup,
            exits=fds[1],
        )
        return cast(Spawned, handle)

    def wait(self, timeout: float) -> Spawned:
        """``poll`` until the reply, at most ``timeout`` s (``Zygote.spawn_*``: tests, bench)."""
        if not readable(self.fileno(), timeout):
            self.close()
            self.zygote.abandon(f"no spawn reply in {timeout} s")
            raise ZygoteError(f"the zygote did not answer a spawn in {timeout} s")
        child = self.poll()
        assert child is not None
        return child

    def close(self) -> None:
        """Stop waiting: a child the zygote still hands over is killed there."""
        self.sock.close()

    def _broken(self, why: str, fds: list[int] | None = None) -> NoReturn:
        _close_all(fds or [])
        self.close()
        self.zygote.abandon(f"zygote {self.zygote.pid}: {why}")
        raise ZygoteError(f"the zygote broke a spawn: {why}")


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
