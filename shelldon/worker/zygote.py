"""The worker zygote: a small process that forks every per-turn worker for the service.

Forked at start-up, before the service reads any secret, it forks each worker with the ``spawn``
machinery: a worker inherits only memory that never held a credential (invariant 4) and dies
with the zygote (``PR_SET_PDEATHSIG``). It holds each child's real handle, so kill (cgroup +
process group + pid), waitid-before-reap and exit codes keep their semantics. This module is
the service's client (``Zygote``; the children it hands over are ``shelldon.worker.remote``)
and the zygote's first steps (``zygote_main``); ``shelldon.worker.zygote_server`` serves.

Protocol, on a ``SOCK_SEQPACKET`` control socket: one msgpack map with an ``id`` per message.
No actor waits for an answer: ``spawn`` and ``gate`` carry, as SCM_RIGHTS, a socket of their
own that the reply comes back on (the caller watches it: ``PendingSpawn``); ``kill`` and
``close`` get no answer; only ``ping`` is answered on the control socket (start-up, tests). A
malformed request is refused: ``{"ok": False, "error", "kind"}``.

- ``{"op": "ping"}`` → ``{"pid", "spare"}`` (readiness; the idle spare's pid or None).
- ``{"op": "spawn"}`` with the reply socket and a memfd holding the encoded ``TurnRequest`` or
  ``ResumeRequest`` (any size) → ``{"pid", "deadline", "cgroup"}`` plus the worker's channel
  end and the read end of its *exit pipe*; the zygote closes its copies at once, and kills a
  worker whose reply nobody takes.
- ``{"op": "gate", "staging", "private", "name", "timeout_s", "address_space_mb", "cpu_s",
  "cap"}`` with the reply socket → ``{"pid", "cgroup"}`` plus the read end of the gate pytest's
  combined output and its exit pipe (``gate.launch_pytest``: confined by the zygote's own
  ``[sandbox]``, the given bounds); it is watched like a worker.
- ``{"op": "kill", "pid"}``; ``{"op": "close", "pid"}`` (the service is done with it: one still
  running is killed). Neither waits for the exit.

Exits are events: the zygote watches every child (a pidfd, else a short poll); when one exits
it sweeps its process group and cgroup, reaps it, writes the code (``EXIT_CODE``) into its exit
pipe and closes it. The service watches that pipe like any descriptor; EOF with no code means
the zygote died. The zygote also holds the ceiling: a child still running ``BACKSTOP_S`` past
its deadline and grace is killed there, whatever the service did. EOF on the control socket
kills and reaps every child and the spare, then the zygote exits 0.

The spare: unless started with ``spare=False``, the zygote keeps one plain-turn worker forked
ahead (``spawn.spawn_spare``). A turn spawn hands it the request (``spare.assign_spare``; the
deadline is fixed then), replies, and only then forks the next spare, so no spawn waits for a
fork. A spare forked with another self-coded toolbox (its fingerprint differs), dead while idle
or not taking its assignment is discarded and the turn gets a fresh fork. Resumes always fork
afresh: their approved call runs before the confinement closes.

The service side never waits in an actor: a zygote that dies, stalls past ``REQUEST_TIMEOUT_S``,
fills its control socket or breaks the protocol is SIGKILLed (its workers die with it) and
every later spawn raises ``ZygoteError``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any, NoReturn

import msgpack
import structlog

from shelldon.config import Settings
from shelldon.contracts import ContractError, ResumeRequest, TurnRequest, encode
from shelldon.proc import sandbox
from shelldon.proc.child import Child, SpawnError
from shelldon.proc.ties import die_with_parent
from shelldon.secrets import forget_env_secrets
from shelldon.toolbox.gate import GateLimits
from shelldon.worker.prepare import close_inherited_fds, reopen_stdio, reset_signals
from shelldon.worker.remote import PendingSpawn, ZygoteError, ZygoteGate, ZygoteWorkerHandle
from shelldon.worker.spawn import RegistryFactory, above_stdio
from shelldon.worker.zygote_server import MAX_MESSAGE, ZygoteServer

log = structlog.get_logger(__name__)

REQUEST_TIMEOUT_S = 5.0
"""How long the service waits for any one reply before it declares the zygote broken."""


def zygote_main(
    sock: socket.socket,
    parent_pid: int,
    settings: Settings,
    registry_factory: RegistryFactory | None,
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


class Zygote:
    """The service's client of the zygote process (one client; calls are serialized)."""

    def __init__(self, child: Child, sock: socket.socket) -> None:
        self.pid = child.pid
        self._child = child
        self._sock = sock
        self._timeout = REQUEST_TIMEOUT_S
        self._lock = threading.Lock()
        self._seq = 0
        self._dead: str | None = None
        # Workers not yet reaped or closed, with their cgroup (swept if the zygote is killed).
        self._live: dict[int, str | None] = {}

    @classmethod
    def start(
        cls,
        settings: Settings,
        *,
        registry_factory: RegistryFactory | None = None,
        spare: bool = True,
    ) -> Zygote:
        """Fork the zygote and return once it answered a ping (with ``spare``, once it also
        forked its first spare). Call it from the main thread, before any secret is read: its
        ``PR_SET_PDEATHSIG`` fires when the *thread* that forked it exits, not the process."""
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

        def body() -> None:  # pragma: no cover - the zygote; covered by the tests' assertions
            try:
                ours.close()
            finally:
                zygote_main(theirs, parent_pid, settings, registry_factory, spare)

        try:
            child = Child.fork(body)
        except SpawnError as exc:
            ours.close()
            theirs.close()
            raise ZygoteError(f"cannot fork the zygote: {exc}") from exc
        theirs.close()
        pid = child.pid
        zygote = cls(child, ours)
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
        """The pid of the zygote's idle spare, if it has one (diagnostics, tests); asked after a
        spawn, it answers once that spawn's next spare was forked."""
        pid = self.call({"op": "ping"}).get("spare")
        return pid if isinstance(pid, int) else None

    def alive(self) -> bool:
        """Whether the zygote still runs and serves."""
        with self._lock:
            if self._dead is not None:
                return False
            code = self._child.reap(block=False)
            if code is None:
                return True
            self._mark_dead(f"the zygote exited ({code})")
            self._kill_hard()  # sweeps what its workers left in their cgroups
            return False

    def stop(self, timeout: float = 2.0) -> None:
        """Ask the zygote to kill and reap its workers and exit (EOF on its control socket);
        past ``timeout`` it is SIGKILLed. Always reaps the zygote. Idempotent."""
        with self._lock:
            if self._dead is None:
                self._dead = "the zygote was stopped"
            self._sock.close()
            if self._child.wait_exit(max(0.0, timeout)):
                self._child.reap(block=True)
            else:
                log.warning("zygote_did_not_stop", pid=self.pid)
                self._kill_hard()
            self._child.close()
            self._live.clear()

    def begin_turn(self, request: TurnRequest | ResumeRequest) -> PendingSpawn[ZygoteWorkerHandle]:
        """Ask for a worker that runs (or resumes) ``request``; its handle arrives on the
        returned ``PendingSpawn`` (watch its ``fileno``). Never waits for the zygote."""
        try:
            blob = encode(request)
            memfd = os.memfd_create("shelldon-request", os.MFD_CLOEXEC)
        except (ContractError, OSError) as exc:
            raise SpawnError(f"cannot hand the request to the zygote: {exc}") from exc
        try:
            view = memoryview(blob)
            while view:
                view = view[os.write(memfd, view) :]
            return self._begin({"op": "spawn"}, memfd, turn_id=request.turn_id)
        except OSError as exc:
            raise SpawnError(f"cannot hand the request to the zygote: {exc}") from exc
        finally:
            os.close(memfd)

    def begin_gate(
        self, staging: Path, private: Path, name: str, limits: GateLimits
    ) -> PendingSpawn[ZygoteGate]:
        """Ask for a gate's pytest on ``test_<name>.py`` in ``staging``; see ``begin_turn``."""
        request = {
            "op": "gate",
            "staging": str(staging),
            "private": str(private),
            "name": name,
            "timeout_s": limits.timeout_s,
            "address_space_mb": limits.address_space_mb,
            "cpu_s": limits.cpu_s,
            "cap": limits.max_output_chars,
        }
        return self._begin(request, gate_cap=limits.max_output_chars)

    def spawn_turn(self, request: TurnRequest | ResumeRequest) -> ZygoteWorkerHandle:
        """``begin_turn``, waited for (tests, benchmarks: actors never wait)."""
        return self.begin_turn(request).wait(self._timeout)

    def _begin(self, request: dict[str, Any], *fds: int, **what: Any) -> PendingSpawn[Any]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.post(request, theirs.fileno(), *fds)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        return PendingSpawn(self, ours, **what)

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request, one reply on the control socket: ``ping`` (ZygoteError: the zygote is
        gone; SpawnError: refused)."""
        with self._lock:
            if self._dead is not None:
                raise ZygoteError(self._dead)
            self._seq += 1
            seq = self._seq
            try:
                self._sock.settimeout(self._timeout)
                self._sock.send(msgpack.packb({**request, "id": seq}))
                data, _, flags, _ = self._sock.recvmsg(MAX_MESSAGE)
                if not data:
                    raise ZygoteError("the zygote closed its control socket")
                if flags & socket.MSG_TRUNC:
                    raise ZygoteError("the zygote sent an oversized reply")
                reply = msgpack.unpackb(data)
                if not isinstance(reply, dict) or reply.get("id") != seq:
                    raise ZygoteError(f"the zygote answered out of turn: {reply!r:.120}")
            except (OSError, ValueError, msgpack.UnpackException, ZygoteError) as exc:
                reason = "timed out" if isinstance(exc, TimeoutError) else "failed"
                message = f"zygote {self.pid} {reason}: {exc}"
                self._fail(message)
                raise ZygoteError(message) from exc
        if not reply.get("ok"):
            raise SpawnError(f"zygote refused {request.get('op')!r}: {reply.get('error')}")
        return reply

    def post(self, request: dict[str, Any], *fds: int) -> None:
        """Send one message that gets no reply here (``kill``, ``close``; ``spawn`` and
        ``gate`` with their reply socket). Never waits: a zygote whose socket is full has
        stopped serving, and is declared broken (ZygoteError)."""
        with self._lock:
            if self._dead is not None:
                raise ZygoteError(self._dead)
            self._seq += 1
            data = msgpack.packb({**request, "id": self._seq})
            try:
                socket.send_fds(self._sock, [data], list(fds), socket.MSG_DONTWAIT)
            except OSError as exc:
                message = f"zygote {self.pid} does not take requests: {exc}"
                self._fail(message)
                raise ZygoteError(message) from exc

    def track(self, pid: int, cgroup: str | None) -> None:
        """``pid`` was handed to this process: its cgroup is swept if the zygote is killed."""
        self._live[pid] = cgroup

    def forget(self, pid: int) -> None:
        """``pid`` was reaped or closed: no cgroup of its to sweep any more."""
        self._live.pop(pid, None)

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
        self._child.kill()
        self._child.reap(block=True)
        # Workers died by PDEATHSIG; what their tools left in a turn's cgroup goes now.
        for cgroup in self._live.values():
            if cgroup is not None:
                sandbox.TurnCgroup(Path(cgroup)).close()
        self._live.clear()
