"""The worker zygote: a small process that forks every per-turn worker for the service.

The service forks the zygote at start-up, before it reads any secret; from then on the service
(which will hold the bot token and the API key) never forks a worker itself. It asks the zygote
instead, over a ``SOCK_SEQPACKET`` control socket, and the zygote forks the worker with the
existing ``spawn`` machinery: the worker is the zygote's child, inherits only the zygote's
memory (which never held a credential, invariant 4) and dies with it (``PR_SET_PDEATHSIG``).

Protocol: every message is one msgpack map and gets exactly one reply map
``{"id": <request id>, "ok": bool, ...}``; ``ok: False`` carries ``error`` (and ``kind``).

- ``{"op": "ping"}`` → ``{"pid", "spare"}`` (readiness; the idle spare's pid or None).
- ``{"op": "part", "data": bytes}`` → ``{}``: a slice of the next spawn's request (a
  ``shelldon.contracts.encode`` blob may be larger than one seqpacket message).
- ``{"op": "spawn", "kind": "turn"|"resume", "request": bytes}`` → ``{"pid", "deadline",
  "cgroup"}`` plus two descriptors as SCM_RIGHTS: the worker's channel end and the read end of
  its *exit pipe*; the zygote closes its copies at once.
- ``{"op": "kill", "pid"}`` → ``{}``; ``{"op": "close", "pid"}`` → ``{}`` (the service is done
  with that worker: one still running is killed). Neither waits for the worker to exit.

Exits are events, not requests: the zygote watches every worker (a pidfd where the kernel has
one, else a short poll), and when one exits it sweeps its process group and cgroup, reaps it,
and writes the exit code (4 bytes, signed, little-endian) into its exit pipe, then closes it.
The service watches that descriptor like any other, so no actor ever waits for a process; EOF
with no code means the zygote itself died. The zygote also holds the turn's ceiling: a worker
still running ``BACKSTOP_S`` past its deadline and grace is killed there, whatever the service
did.

The spare: unless started with ``spare=False``, the zygote keeps one plain-turn worker forked
ahead of time (``spawn.spawn_spare``: prepared, confined, in its turn's cgroup, registry built,
blocked on its channel). A ``turn`` spawn hands the spare the request (``spawn.assign_spare``;
the deadline is fixed then) instead of forking, replies as above, and only then forks the next
spare, so no spawn waits for a fork. The spare is discarded (killed, reaped) and the turn gets a
freshly forked worker when the self-coded toolbox changed since the spare was forked (its
fingerprint differs), or when the spare died while idle or does not take the assignment.
``resume`` spawns always fork afresh: their approved call runs before the confinement closes.

The zygote holds the real ``WorkerHandle`` of every worker, so kill (cgroup + process group +
pid), waitid-before-reap and exit codes keep the semantics of ``spawn``. A malformed request
gets an error reply; EOF on the control socket kills and reaps every worker and the spare, then
the zygote exits 0. The service side (``Zygote``) is synchronous, locked, and bounded by a
timeout: a zygote that dies, stalls or breaks the protocol is SIGKILLed (its workers die with
it) and every later spawn raises ``ZygoteError``.
"""

from __future__ import annotations

import array
import contextlib
import gc
import math
import os
import select
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import msgpack
import structlog

from shelldon.config import Settings
from shelldon.contracts import (
    Assignment,
    ContractError,
    ResumeRequest,
    TurnRequest,
    decode,
    encode,
)
from shelldon.core import sandbox
from shelldon.core.child import EXIT_UNKNOWN, SpawnError, die_with_parent, readable
from shelldon.secrets import forget_env_secrets
from shelldon.worker import spawn
from shelldon.worker.channel import pack_frame
from shelldon.worker.spawn import (
    RegistryFactory,
    WorkerHandle,
    above_stdio,
    close_inherited_fds,
    reopen_stdio,
    reset_signals,
)
from shelldon.worker.tools import build_registry, context_from_settings, selfcoded

log = structlog.get_logger(__name__)

REQUEST_TIMEOUT_S = 5.0
"""How long the service waits for any one reply before it declares the zygote broken."""

PART_BYTES = 60 * 1024
"""Request bytes carried per seqpacket message (well under the default socket buffer)."""

MAX_MESSAGE = 128 * 1024
"""Receive buffer for one control message; a longer message is refused as truncated."""

MAX_REQUEST = 2 * 1024 * 1024
"""Spawn request bytes the zygote accumulates from ``part`` messages before refusing."""

BACKSTOP_S = 1.0
"""How long past a worker's deadline and kill grace the zygote kills it itself (the service
kills at deadline + grace; this holds the ceiling should the service not)."""

REAP_BLOCK_S = 10.0
"""Longest a blocking ``reap`` waits for the zygote to report an exit before it declares the
zygote broken (only tests and benchmarks block: actors watch the exit pipe)."""

EXIT_CODE = struct.Struct("<i")
"""What the zygote writes into a worker's exit pipe once it has reaped it."""

_POLL_FALLBACK_S = 0.05
"""Without a pidfd for some worker, how often the zygote looks for its exit."""

_OPS = frozenset({"ping", "part", "spawn", "kill", "close"})
_FD_SIZE = array.array("i").itemsize


class ZygoteError(SpawnError):
    """The zygote is dead, timed out or broke the protocol: no worker can be started."""


# ------------------------------------------------------------------ the service's side


@dataclass(slots=True)
class ZygoteWorkerHandle(WorkerHandle):
    """A worker forked by the zygote, as the TurnActor sees it.

    ``fileno``/``send``/``read_frames`` work on the channel end received from the zygote, as
    in ``WorkerHandle``. ``exit_fileno`` is the read end of the worker's exit pipe: readable
    once the zygote has reaped the worker (or died). ``reap`` reads it; ``kill`` and ``close``
    are requests to the zygote, which is the worker's parent and holds its real handle. None of
    them raises, and only ``reap(block=True)`` waits: if the zygote is gone, its workers died
    with it (PDEATHSIG), so the turn's cgroup is swept and the exit is ``EXIT_UNKNOWN``.
    """

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
            self.zygote.call({"op": "kill", "pid": self.pid})
        except ZygoteError as exc:
            log.warning("zygote_kill_failed", pid=self.pid, turn_id=self.turn_id, error=str(exc))
            self._orphaned()
        except SpawnError as exc:  # the zygote no longer knows it: already gone
            log.info("zygote_kill_refused", pid=self.pid, error=str(exc))

    def reap(self, block: bool = False) -> int | None:
        """The worker's exit code (negative: killed by that signal), or None while it runs and
        ``block`` is False."""
        if self.exit_code is not None:
            return self.exit_code
        if self.exits < 0:
            self.exit_code = EXIT_UNKNOWN
            return self.exit_code
        if not readable(self.exits, REAP_BLOCK_S if block else 0.0):
            if not block:
                return None
            if self.zygote is not None:
                self.zygote.abandon(f"no exit reported for worker {self.pid} in {REAP_BLOCK_S} s")
            self.exit_code = EXIT_UNKNOWN
            return self.exit_code
        try:
            data = os.read(self.exits, EXIT_CODE.size)
        except OSError:
            data = b""
        if len(data) == EXIT_CODE.size:
            (self.exit_code,) = EXIT_CODE.unpack(data)
        else:  # EOF without a code: the zygote died, and its workers with it
            self._orphaned()
            self.exit_code = EXIT_UNKNOWN
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
                zygote.call({"op": "close", "pid": self.pid})
            except ZygoteError as exc:
                log.warning("zygote_close_failed", pid=self.pid, error=str(exc))
                self._orphaned()
                self.exit_code = EXIT_UNKNOWN
            except SpawnError as exc:
                log.info("zygote_close_refused", pid=self.pid, error=str(exc))
        zygote.forget(self.pid)

    def _orphaned(self) -> None:
        """The zygote is gone (it was killed): the worker died by PDEATHSIG; whatever its
        tools left in the turn's cgroup goes too."""
        if self.cgroup_path is not None:
            sandbox.TurnCgroup(Path(self.cgroup_path)).close()

    def __enter__(self) -> ZygoteWorkerHandle:
        return self


class Zygote:
    """The service's client of the zygote process (one client; calls are serialized)."""

    def __init__(
        self, pid: int, sock: socket.socket, *, timeout: float = REQUEST_TIMEOUT_S
    ) -> None:
        self.pid = pid
        self._sock = sock
        self._timeout = timeout
        self._lock = threading.Lock()
        self._seq = 0
        self._dead: str | None = None
        self._exit_code: int | None = None
        # Workers not yet reaped or closed, with their cgroup (swept if the zygote is killed).
        self._live: dict[int, str | None] = {}

    # -------------------------------------------------------------- life cycle

    @classmethod
    def start(
        cls,
        settings: Settings,
        *,
        registry_factory: RegistryFactory = build_registry,
        spare: bool = True,
    ) -> Zygote:
        """Fork the zygote now and return once it has answered one ping (with ``spare``, once
        it has also forked its first spare worker).

        Call it from the main thread, before any secret is read: the zygote's
        ``PR_SET_PDEATHSIG`` fires when the *thread* that forked it exits, not the process.
        """
        if threading.current_thread() is not threading.main_thread():
            log.warning("zygote_started_off_main_thread")
        # Workers are confined to the workspace: it must exist before the first one is prepared.
        settings.workspace.mkdir(parents=True, exist_ok=True)
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            ours, theirs = above_stdio(ours), above_stdio(theirs)
        except OSError as exc:
            raise ZygoteError(f"cannot open the zygote's control socket: {exc}") from exc
        parent_pid = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:
            ours.close()
            theirs.close()
            raise ZygoteError(f"cannot fork the zygote: {exc}") from exc
        if pid == 0:  # pragma: no cover - the zygote; covered by the tests' assertions
            try:
                ours.close()
            finally:
                _zygote_main(theirs, parent_pid, settings, registry_factory, spare)
        theirs.close()
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also from this side: no window before the child's own
        zygote = cls(pid, ours)
        try:
            reply = zygote.call({"op": "ping"})
        except SpawnError:
            zygote.stop(timeout=0)
            raise
        if reply.get("pid") != pid:
            zygote.stop(timeout=0)
            raise ZygoteError(f"the zygote answered as {reply.get('pid')!r}, not {pid}")
        log.info("zygote_started", pid=pid)
        return zygote

    def spare_pid(self) -> int | None:
        """The pid of the zygote's idle spare worker, if it has one now (diagnostics, tests).

        Asked after a spawn, it answers once that spawn's next spare was forked."""
        pid = self.call({"op": "ping"}).get("spare")
        return pid if isinstance(pid, int) else None

    def alive(self) -> bool:
        """Whether the zygote still runs and serves."""
        with self._lock:
            if self._dead is not None:
                return False
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                done, status = self.pid, -1
            if done == 0:
                return True
            self._exit_code = EXIT_UNKNOWN if status < 0 else os.waitstatus_to_exitcode(status)
            self._mark_dead(f"the zygote exited ({self._exit_code})")
            self._kill_hard()  # sweeps what its workers left in their cgroups
            return False

    def stop(self, timeout: float = 2.0) -> None:
        """Ask the zygote to kill and reap its workers and exit (EOF on its control socket);
        past ``timeout`` it is SIGKILLed. Always reaps the zygote. Idempotent."""
        with self._lock:
            if self._dead is None:
                self._dead = "the zygote was stopped"
            self._sock.close()
            until = time.monotonic() + max(0.0, timeout)
            while self._exit_code is None:
                try:
                    done, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:
                    break  # already reaped
                if done:
                    self._exit_code = os.waitstatus_to_exitcode(status)
                    break
                if time.monotonic() >= until:
                    log.warning("zygote_did_not_stop", pid=self.pid)
                    self._kill_hard()
                    break
                time.sleep(0.002)
            self._live.clear()

    # -------------------------------------------------------------- spawning

    def spawn_turn(self, request: TurnRequest) -> ZygoteWorkerHandle:
        """A worker (forked by the zygote) that runs ``request``."""
        return self._spawn("turn", request.turn_id, request)

    def spawn_resume(self, request: ResumeRequest) -> ZygoteWorkerHandle:
        """A worker (forked by the zygote) that resumes a parked turn."""
        return self._spawn("resume", request.turn_id, request)

    def _spawn(self, kind: str, turn_id: str, request: Any) -> ZygoteWorkerHandle:
        try:
            blob = encode(request)
        except ContractError as exc:
            raise SpawnError(f"cannot hand the request to the zygote: {exc}") from exc
        with self._lock:
            parts = [blob[i : i + PART_BYTES] for i in range(0, len(blob), PART_BYTES)] or [b""]
            for part in parts[:-1]:
                self._call_locked({"op": "part", "data": part})
            reply, fds = self._call_locked(
                {"op": "spawn", "kind": kind, "request": parts[-1]}, with_fds=True
            )
            pid, deadline, cgroup = reply.get("pid"), reply.get("deadline"), reply.get("cgroup")
            if (
                not isinstance(pid, int)
                or not isinstance(deadline, float)
                or not isinstance(cgroup, str | None)
                or len(fds) > 2
            ):
                for fd in fds:
                    os.close(fd)
                self._fail("the zygote's spawn reply is malformed")
                raise ZygoteError("the zygote's spawn reply is malformed")
            if len(fds) < 2:
                # The kernel dropped a descriptor (this process is out of them): the worker
                # has no one to talk to; the zygote ends it, and this turn cannot start.
                for fd in fds:
                    os.close(fd)
                with contextlib.suppress(SpawnError):
                    self._call_locked({"op": "close", "pid": pid})
                raise SpawnError("the worker's channel did not arrive (out of descriptors?)")
            self._live[pid] = cgroup
        sock = socket.socket(fileno=fds[0])
        sock.setblocking(False)
        os.set_blocking(fds[1], False)
        return ZygoteWorkerHandle(
            pid=pid,
            sock=sock,
            deadline=deadline,
            turn_id=turn_id,
            zygote=self,
            cgroup_path=cgroup,
            exits=fds[1],
        )

    # -------------------------------------------------------------- the wire

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request, one reply (ZygoteError: zygote gone; SpawnError: request refused)."""
        with self._lock:
            return self._call_locked(request)[0]

    def forget(self, pid: int) -> None:
        """``pid`` was reaped or closed: no cgroup of its to sweep any more."""
        self._live.pop(pid, None)

    def _call_locked(
        self, request: dict[str, Any], *, with_fds: bool = False
    ) -> tuple[dict[str, Any], list[int]]:
        if self._dead is not None:
            raise ZygoteError(self._dead)
        self._seq += 1
        seq = self._seq
        until = time.monotonic() + self._timeout
        fds: list[int] = []
        try:
            self._sock.settimeout(self._timeout)
            self._sock.send(msgpack.packb({**request, "id": seq}))
            while True:
                self._sock.settimeout(max(0.001, until - time.monotonic()))
                data, fds, flags, _ = socket.recv_fds(self._sock, MAX_MESSAGE, 2)
                if not data:
                    raise ZygoteError("the zygote closed its control socket")
                if flags & socket.MSG_TRUNC:
                    for fd in fds:
                        os.close(fd)
                    raise ZygoteError("the zygote sent an oversized reply")
                reply = msgpack.unpackb(data)
                if not isinstance(reply, dict) or reply.get("id") != seq:
                    for fd in fds:
                        os.close(fd)
                    raise ZygoteError(f"the zygote answered out of turn: {reply!r:.120}")
                break
        except (OSError, ValueError, msgpack.UnpackException, ZygoteError) as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else "failed"
            message = f"zygote {self.pid} {reason}: {exc}"
            self._fail(message)
            raise ZygoteError(message) from exc
        if fds and not with_fds:
            for fd in fds:
                os.close(fd)
            fds = []
        if not reply.get("ok"):
            for fd in fds:
                os.close(fd)
            raise SpawnError(f"zygote refused {request.get('op')!r}: {reply.get('error')}")
        return reply, fds

    def abandon(self, reason: str) -> None:
        """Declare the zygote broken from outside a call (it failed to report an exit)."""
        with self._lock:
            if self._dead is None:
                self._fail(reason)

    def _fail(self, reason: str) -> None:
        """The zygote cannot be trusted any more: kill it (its workers die with it)."""
        log.error("zygote_failed", pid=self.pid, error=reason)
        self._mark_dead(reason)
        self._kill_hard()

    def _mark_dead(self, reason: str) -> None:
        self._dead = reason
        self._sock.close()

    def _kill_hard(self) -> None:
        if self._exit_code is None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            try:
                _, status = os.waitpid(self.pid, 0)
                self._exit_code = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                self._exit_code = EXIT_UNKNOWN
        # Workers died by PDEATHSIG; what their tools left in a turn's cgroup goes now.
        for cgroup in self._live.values():
            if cgroup is not None:
                sandbox.TurnCgroup(Path(cgroup)).close()
        self._live.clear()


# ------------------------------------------------------------------ the zygote process


def _zygote_main(
    sock: socket.socket,
    parent_pid: int,
    settings: Settings,
    registry_factory: RegistryFactory,
    spare: bool = True,
) -> NoReturn:
    """The zygote's whole life; every path ends in ``os._exit``."""
    code = 1
    try:
        reset_signals()
        # A terminal's Ctrl-C is for the service, which then stops us.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # Inherited objects must never be collected here: a finalizer would close an fd number
        # this process may have reused by then. (Frozen before the fds close, not after.)
        gc.freeze()
        die_with_parent(parent_pid, 1)
        close_inherited_fds(sock.fileno())
        # Rulesets the service may have prebuilt were closed just now: forget their numbers,
        # or the next prepared worker would "apply" whatever reuses them. (No public hook in
        # sandbox for this yet.)
        sandbox.forget_prebuilt()
        os.setpgid(0, 0)
        reopen_stdio()
        forget_env_secrets()
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(actor="zygote")
        ZygoteServer(sock, settings, registry_factory, spare=spare).serve()
        code = 0
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            log.error("zygote_crashed", error=f"{type(exc).__name__}: {exc}")
    finally:
        os._exit(code)


class RequestError(Exception):
    """A request the zygote refuses (the reply says why); the zygote keeps serving."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(slots=True)
class Worker:
    """A worker handed to the service and not yet reported: its handle (whose pidfd the loop
    watches) and the write end of its exit pipe."""

    handle: WorkerHandle
    exit_w: int
    killed_overdue: bool = False

    def release(self, code: int | None) -> None:
        """Report ``code`` (None: nothing to report) and close the exit pipe."""
        if self.exit_w < 0:
            return
        if code is not None:
            with contextlib.suppress(OSError):  # the service closed its end: nobody listens
                os.write(self.exit_w, EXIT_CODE.pack(code))
        with contextlib.suppress(OSError):
            os.close(self.exit_w)
        self.exit_w = -1


@dataclass(slots=True)
class Spare:
    """The idle spare worker and the toolbox it was forked with (its registry holds that)."""

    handle: WorkerHandle
    fingerprint: selfcoded.Fingerprint


class ZygoteServer:
    """Serves one client on ``sock`` until EOF; holds the real handle of every worker."""

    def __init__(
        self,
        sock: socket.socket,
        settings: Settings,
        registry_factory: RegistryFactory,
        *,
        spare: bool = True,
    ) -> None:
        self.sock = sock
        self.settings = settings
        self.registry_factory = registry_factory
        self.context = context_from_settings(settings)
        self.keep_spare = spare
        self.spare: Spare | None = None
        self.workers: dict[int, Worker] = {}
        self.pending = bytearray()
        self.handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "ping": self.ping,
            "part": self.part,
            "kill": self.kill,
            "close": self.close,
        }

    def serve(self) -> None:
        """Answer requests and report exits until the client hangs up, then kill and reap
        every worker."""
        self.sock.setblocking(True)
        try:
            spawn.warm_codec()  # before any worker is forked: they all inherit it
            self.refill()
            while True:
                poller = select.poll()
                poller.register(self.sock.fileno(), select.POLLIN)
                for worker in self.workers.values():
                    if worker.handle.exit_fileno() >= 0:
                        poller.register(worker.handle.exit_fileno(), select.POLLIN)
                timeout = self.next_look()
                ready = poller.poll(None if timeout is None else max(1, int(timeout * 1000)))
                if any(fd == self.sock.fileno() for fd, _ in ready) and not self.receive():
                    return
                self.look_at_workers()
        finally:
            self.shutdown()

    def receive(self) -> bool:
        """Answer the one message waiting; False once the client is gone."""
        try:
            data, fds, flags, _ = socket.recv_fds(self.sock, MAX_MESSAGE, 4)
        except InterruptedError:
            return True
        except OSError as exc:
            log.error("zygote_control_failed", error=str(exc))
            return False
        for fd in fds:  # nothing we asked for
            with contextlib.suppress(OSError):
                os.close(fd)
        if not data:
            return False
        self.handle(data, truncated=bool(flags & socket.MSG_TRUNC))
        return True

    def next_look(self) -> float | None:
        """Seconds until the workers need looking at without an event (a backstop kill, or a
        worker without a pidfd), or None: only an event can change anything."""
        if any(w.handle.exit_fileno() < 0 for w in self.workers.values()):
            return _POLL_FALLBACK_S
        due = [self.backstop_at(w) for w in self.workers.values() if not w.killed_overdue]
        due = [d for d in due if d != math.inf]
        return max(0.0, min(due) - time.monotonic()) if due else None

    def backstop_at(self, worker: Worker) -> float:
        return worker.handle.deadline + self.settings.limits.kill_grace_s + BACKSTOP_S

    def look_at_workers(self) -> None:
        """Report every worker that exited (group and cgroup swept, reaped); kill one that ran
        past its backstop."""
        now = time.monotonic()
        for pid, worker in list(self.workers.items()):
            handle = worker.handle
            code = handle.reap(block=False)
            if code is None:
                if not worker.killed_overdue and now >= self.backstop_at(worker):
                    log.warning("worker_killed_overdue", pid=pid, turn_id=handle.turn_id)
                    worker.killed_overdue = True
                    handle.kill()
                continue
            with contextlib.suppress(Exception):
                handle.close()  # the turn's cgroup: stragglers die, the directory goes
            worker.release(code)
            del self.workers[pid]
            log.info("worker_exited", pid=pid, turn_id=handle.turn_id, exit_code=code)

    def handle(self, data: bytes, *, truncated: bool = False) -> None:
        """Answer one message (never raises for a bad one)."""
        seq: Any = None
        try:
            if truncated:
                raise RequestError("protocol", f"message over {MAX_MESSAGE} bytes")
            try:
                request = msgpack.unpackb(data)
            except (ValueError, msgpack.UnpackException) as exc:
                raise RequestError("protocol", f"not msgpack: {exc}") from exc
            if not isinstance(request, dict):
                raise RequestError("protocol", "a request is a map")
            seq = request.get("id")
            op = request.get("op")
            if not isinstance(seq, int) or op not in _OPS:
                raise RequestError("protocol", f"bad id or op: {op!r:.40}")
            if op not in {"part", "spawn"}:
                self.pending.clear()
            if op == "spawn":
                self.spawn(seq, request)
                return
            reply = self.handlers[op](request)
        except RequestError as exc:
            self.pending.clear()
            self.reply({"id": seq, "ok": False, "kind": exc.kind, "error": str(exc)})
            return
        except Exception as exc:
            self.pending.clear()
            log.error("zygote_request_failed", error=f"{type(exc).__name__}: {exc}")
            self.reply({"id": seq, "ok": False, "kind": "internal", "error": str(exc)})
            return
        self.reply({**reply, "id": seq, "ok": True})

    def reply(self, reply: dict[str, Any], fds: tuple[int, ...] = ()) -> None:
        data = msgpack.packb(reply)
        try:
            if fds:
                socket.send_fds(self.sock, [data], list(fds))
            else:
                self.sock.send(data)
        except OSError as exc:  # the client is gone: the next receive sees EOF
            log.warning("zygote_reply_failed", error=str(exc))

    # -------------------------------------------------------------- requests

    def ping(self, request: dict[str, Any]) -> dict[str, Any]:
        spare = self.spare
        return {"pid": os.getpid(), "spare": spare.handle.pid if spare is not None else None}

    def part(self, request: dict[str, Any]) -> dict[str, Any]:
        data = request.get("data")
        if not isinstance(data, bytes):
            raise RequestError("protocol", "a part carries bytes")
        if len(self.pending) + len(data) > MAX_REQUEST:
            raise RequestError("protocol", f"request over {MAX_REQUEST} bytes")
        self.pending += data
        return {}

    def spawn(self, seq: int, request: dict[str, Any]) -> None:
        data = request.get("request")
        if not isinstance(data, bytes):
            raise RequestError("protocol", "spawn carries the request as bytes")
        blob = bytes(self.pending) + data
        self.pending.clear()
        kind = request.get("kind")
        try:
            contract = decode(blob)
        except ContractError as exc:
            raise RequestError("protocol", f"bad request: {exc}") from exc
        turn: TurnRequest | None = None
        resume: ResumeRequest | None = None
        if kind == "turn" and isinstance(contract, TurnRequest):
            turn = contract
        elif kind == "resume" and isinstance(contract, ResumeRequest):
            resume = contract
        else:
            raise RequestError("protocol", f"{kind!r} with a {type(contract).__name__}")
        handle = self.take_spare(turn) if turn is not None else None
        if handle is None:
            self.discover()
            try:
                if turn is not None:
                    handle = spawn.spawn_turn(
                        turn, self.settings, registry_factory=self.registry_factory
                    )
                else:
                    assert resume is not None
                    handle = spawn.spawn_resume(
                        resume, self.settings, registry_factory=self.registry_factory
                    )
            except SpawnError as exc:
                self.refill()  # no worker for this turn; maybe one for the next
                raise RequestError("spawn", str(exc)) from exc
        try:
            exit_r, exit_w = os.pipe2(os.O_CLOEXEC)
        except OSError as exc:
            self.discard(handle)
            raise RequestError("spawn", f"cannot open the exit pipe: {exc}") from exc
        self.workers[handle.pid] = Worker(handle, exit_w)
        cgroup = str(handle.cgroup.path) if handle.cgroup is not None else None
        try:
            self.reply(
                {
                    "id": seq,
                    "ok": True,
                    "pid": handle.pid,
                    "deadline": handle.deadline,
                    "cgroup": cgroup,
                },
                (handle.sock.fileno(), exit_r),
            )
        finally:
            # The service holds the channel now; a copy here would hide the worker's EOF.
            handle.sock.close()
            os.close(exit_r)
        # Only now, with the service already talking to this turn's worker: the next spare.
        if self.refill():
            self.rehearse()

    # -------------------------------------------------------------- the spare

    def discover(self) -> None:
        """Discover live self-coded tools here, before a fork: the worker inherits the result
        and only checks that the toolbox did not change since."""
        try:
            selfcoded.discover(self.context)
        except Exception as exc:  # the worker's own discovery reports it properly
            log.warning("zygote_discovery_failed", error=f"{type(exc).__name__}: {exc}")

    def refill(self) -> bool:
        """Fork a spare if there is none (and spares are on); whether one was forked. Never
        raises: a spare that cannot be forked now is retried after the next spawn, and that
        turn forks its own worker."""
        if not self.keep_spare or self.spare is not None:
            return False
        try:
            # Read before the fork, hence before the spare's own discovery: a change in
            # between makes the fingerprint differ at assignment, never match a stale toolbox.
            fingerprint = selfcoded.toolbox_fingerprint(self.context)
        except Exception as exc:
            log.warning("spare_not_forked", error=f"toolbox unreadable: {exc}")
            return False
        self.discover()
        try:
            handle = spawn.spawn_spare(self.settings, registry_factory=self.registry_factory)
        except Exception as exc:
            log.warning("spare_not_forked", error=f"{type(exc).__name__}: {exc}")
            return False
        self.spare = Spare(handle, fingerprint)
        return True

    def rehearse(self) -> None:
        """Walk the next spawn's path once without a turn, right after a fork: the memory this
        process shares with the new spare is copied on its first write, and those faults (~0.1
        ms each batch of pages, about half a millisecond a spawn) are better taken now than
        while the service waits for its next worker."""
        with contextlib.suppress(Exception):
            request = TurnRequest("rehearsal", 0, "")
            wire = msgpack.packb({"op": "spawn", "kind": "turn", "request": encode(request)})
            decode(msgpack.unpackb(wire)["request"])
            selfcoded.toolbox_fingerprint(self.context)
            pack_frame(Assignment(request, time.monotonic()))
            msgpack.packb({"id": 0, "ok": True, "pid": 0, "deadline": 0.0, "cgroup": None})

    def take_spare(self, turn: TurnRequest) -> WorkerHandle | None:
        """The spare, assigned ``turn`` (deadline fixed now); None if there is no usable one,
        after discarding one that is stale, dead or stuck."""
        spare, self.spare = self.spare, None
        if spare is None:
            return None
        try:
            current: selfcoded.Fingerprint | None = selfcoded.toolbox_fingerprint(self.context)
        except Exception as exc:
            log.warning("toolbox_unreadable", error=f"{type(exc).__name__}: {exc}")
            current = None
        if current != spare.fingerprint:
            log.info("spare_stale", pid=spare.handle.pid, turn_id=turn.turn_id)
            self.discard(spare.handle)
            return None
        deadline = time.monotonic() + self.settings.limits.turn_timeout_s
        try:
            spawn.assign_spare(spare.handle, turn, deadline)
        except Exception as exc:  # SpawnError above all; whatever it is, no turn gets it
            log.warning("spare_lost", pid=spare.handle.pid, turn_id=turn.turn_id, error=str(exc))
            self.discard(spare.handle)
            return None
        return spare.handle

    @staticmethod
    def discard(handle: WorkerHandle) -> None:
        """Kill, reap and close a worker no turn owns (a spare)."""
        with contextlib.suppress(Exception):
            handle.kill()
            handle.reap(block=True)
        with contextlib.suppress(Exception):
            handle.close()

    def _worker_of(self, request: dict[str, Any]) -> Worker | None:
        pid = request.get("pid")
        return self.workers.get(pid) if isinstance(pid, int) else None

    def kill(self, request: dict[str, Any]) -> dict[str, Any]:
        worker = self._worker_of(request)
        if worker is None:
            raise RequestError("unknown", f"no worker {request.get('pid')!r:.20}")
        worker.handle.kill()
        return {}

    def close(self, request: dict[str, Any]) -> dict[str, Any]:
        """The service is done with a worker: one still running is killed (and reported when
        it is reaped, to nobody). An unknown pid already exited and was reported."""
        worker = self._worker_of(request)
        if worker is not None and worker.handle.reap(block=False) is None:
            worker.handle.kill()
        return {}

    def shutdown(self) -> None:
        """Kill, reap and close every worker still held, and the spare."""
        spare, self.spare = self.spare, None
        if spare is not None:
            self.discard(spare.handle)
        for worker in list(self.workers.values()):
            self.discard(worker.handle)
            worker.release(worker.handle.exit_code)
        self.workers.clear()
