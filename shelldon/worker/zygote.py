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
- ``{"op": "gate", "staging", "private", "name", "timeout_s", "address_space_mb", "cpu_s",
  "cap"}`` → ``{"pid", "cgroup"}`` plus two descriptors: the read end of the gate pytest's
  combined output and its exit pipe. The zygote forks the pytest (``gate.launch_pytest``:
  confinement from its own ``[sandbox]``, the given bounds) and watches it like a worker.
- ``{"op": "kill", "pid"}`` → ``{}``; ``{"op": "close", "pid"}`` → ``{}`` (the service is done
  with that worker or gate: one still running is killed). Neither waits for the exit.

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

This module is the service's side (``Zygote``; its children are ``shelldon.worker.remote``)
and the zygote's first steps (``zygote_main``); then it serves (``shelldon.worker.zygote_server``).
The zygote holds the real ``WorkerHandle`` of every worker (and ``Child`` of every gate), so
kill (cgroup + process group + pid), waitid-before-reap and exit codes keep their semantics. A
malformed request gets an error reply; EOF on the control socket kills and reaps every worker
and the spare, then the zygote exits 0. The service side (``Zygote``) is synchronous, locked,
and bounded by a timeout: a zygote that dies, stalls or breaks the protocol is SIGKILLed (its
workers die with it) and every later spawn raises ``ZygoteError``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

import msgpack
import structlog

from shelldon.config import Settings
from shelldon.contracts import (
    ContractError,
    ResumeRequest,
    TurnRequest,
    encode,
)
from shelldon.proc import sandbox
from shelldon.proc.child import Child, SpawnError
from shelldon.proc.output import Output
from shelldon.proc.ties import die_with_parent
from shelldon.secrets import forget_env_secrets
from shelldon.toolbox.gate import GateLimits
from shelldon.worker.prepare import close_inherited_fds, reopen_stdio, reset_signals
from shelldon.worker.remote import ZygoteError, ZygoteGate, ZygoteWorkerHandle
from shelldon.worker.spawn import RegistryFactory, above_stdio
from shelldon.worker.tools import build_registry
from shelldon.worker.zygote_server import MAX_MESSAGE, ZygoteServer

__all__ = ["MAX_MESSAGE", "PART_BYTES", "Zygote", "ZygoteError", "ZygoteGate", "ZygoteWorkerHandle"]

log = structlog.get_logger(__name__)

REQUEST_TIMEOUT_S = 5.0
"""How long the service waits for any one reply before it declares the zygote broken."""

PART_BYTES = 60 * 1024
"""Request bytes carried per seqpacket message (well under the default socket buffer)."""


def zygote_main(
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

    def __init__(
        self, child: Child, sock: socket.socket, *, timeout: float = REQUEST_TIMEOUT_S
    ) -> None:
        self.pid = child.pid
        self._child = child
        self._sock = sock
        self._timeout = timeout
        self._lock = threading.Lock()
        self._seq = 0
        self._dead: str | None = None
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
        """The pid of the zygote's idle spare worker, if it has one now (diagnostics, tests).

        Asked after a spawn, it answers once that spawn's next spare was forked."""
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

    # -------------------------------------------------------------- spawning

    def spawn_turn(self, request: TurnRequest) -> ZygoteWorkerHandle:
        """A worker (forked by the zygote) that runs ``request``."""
        return self._spawn("turn", request.turn_id, request)

    def spawn_resume(self, request: ResumeRequest) -> ZygoteWorkerHandle:
        """A worker (forked by the zygote) that resumes a parked turn."""
        return self._spawn("resume", request.turn_id, request)

    def spawn_gate(self, staging: Path, private: Path, name: str, limits: GateLimits) -> ZygoteGate:
        """A gate's pytest (forked by the zygote) on ``test_<name>.py`` in ``staging``."""
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
        with self._lock:
            reply, fds = self._call_locked(request, with_fds=True)
            pid, cgroup = reply.get("pid"), reply.get("cgroup")
            if not isinstance(pid, int) or not isinstance(cgroup, str | None) or len(fds) != 2:
                for fd in fds:
                    os.close(fd)
                if isinstance(pid, int):
                    with contextlib.suppress(SpawnError):
                        self._call_locked({"op": "close", "pid": pid})
                raise SpawnError("the zygote's gate reply is malformed (out of descriptors?)")
            self._live[pid] = cgroup
        os.set_blocking(fds[1], False)
        output = Output(fds[0], limits.max_output_chars, tail=True)
        return ZygoteGate(self, pid, output, fds[1], cgroup)

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
        self._child.kill()
        self._child.reap(block=True)
        # Workers died by PDEATHSIG; what their tools left in a turn's cgroup goes now.
        for cgroup in self._live.values():
            if cgroup is not None:
                sandbox.TurnCgroup(Path(cgroup)).close()
        self._live.clear()
