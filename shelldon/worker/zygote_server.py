"""The zygote process: forks every per-turn worker, reports each exit, keeps the spare.

Forked by ``shelldon.worker.zygote.Zygote.start`` before the service reads any secret;
``zygote_main`` is its whole life. ``ZygoteServer`` answers the control socket's requests (the
protocol is in ``shelldon.worker.zygote``), holds the real ``WorkerHandle`` of every worker it
handed out, watches them (pidfd), and writes each one's exit code into its exit pipe once it has
swept and reaped it; it kills a worker still running ``BACKSTOP_S`` past its deadline and grace.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import select
import signal
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import msgpack
import structlog

from shelldon.config import Settings
from shelldon.contracts import Assignment, ContractError, ResumeRequest, TurnRequest, decode, encode
from shelldon.proc import sandbox
from shelldon.proc.child import SpawnError, die_with_parent
from shelldon.secrets import forget_env_secrets
from shelldon.worker import spawn
from shelldon.worker.channel import pack_frame
from shelldon.worker.spawn import (
    RegistryFactory,
    WorkerHandle,
    close_inherited_fds,
    reopen_stdio,
    reset_signals,
)
from shelldon.worker.tools import context_from_settings, selfcoded

log = structlog.get_logger(__name__)

MAX_MESSAGE = 128 * 1024
"""Receive buffer for one control message; a longer message is refused as truncated."""

MAX_REQUEST = 2 * 1024 * 1024
"""Spawn request bytes the zygote accumulates from ``part`` messages before refusing."""

BACKSTOP_S = 1.0
"""How long past a worker's deadline and kill grace the zygote kills it itself (the service
kills at deadline + grace; this holds the ceiling should the service not)."""

EXIT_CODE = struct.Struct("<i")
"""What the zygote writes into a worker's exit pipe once it has reaped it."""

_POLL_FALLBACK_S = 0.05
"""Without a pidfd for some worker, how often the zygote looks for its exit."""

_OPS = frozenset({"ping", "part", "spawn", "kill", "close"})


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
