"""The zygote process: forks every per-turn worker, reports each exit, keeps the spare.

``ZygoteServer`` is what ``shelldon.worker.zygote.zygote_main`` runs once the zygote is forked;
the protocol and the exit, backstop and spare rules are described in that module.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import select
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import structlog

from shelldon.config import Settings
from shelldon.contracts import Assignment, ContractError, ResumeRequest, TurnRequest, decode, encode
from shelldon.proc import sandbox
from shelldon.proc.child import Child, SpawnError
from shelldon.toolbox.gate import GateLimits, launch_pytest
from shelldon.worker import spare as spares
from shelldon.worker import spawn
from shelldon.worker.channel import pack_frame
from shelldon.worker.handle import WorkerHandle
from shelldon.worker.spawn import RegistryFactory
from shelldon.worker.tools import build_registry, context_from_settings, selfcoded

log = structlog.get_logger(__name__)

MAX_MESSAGE = 128 * 1024
"""Receive buffer for one control message; a longer message is refused as truncated."""

MAX_REQUEST = 8 * 1024 * 1024
"""The largest spawn request (its memfd) the zygote reads."""

BACKSTOP_S = 1.0
"""How long past a worker's deadline and kill grace the zygote kills it itself (the service
kills at deadline + grace; this holds the ceiling should the service not)."""

EXIT_CODE = struct.Struct("<i")
"""What the zygote writes into a worker's exit pipe once it has reaped it."""

_POLL_FALLBACK_S = 0.05
"""Without a pidfd for some worker, how often the zygote looks for its exit."""

_FDS = {"ping": 0, "kill": 0, "close": 0, "spawn": 2, "gate": 1}
"""Each op, and the descriptors that come with it (the reply socket first)."""


def read_request(memfd: int) -> bytes:
    """The encoded request in ``memfd``, which is closed here, before any fork: no worker
    inherits it."""
    try:
        size = os.fstat(memfd).st_size
        if size > MAX_REQUEST:
            raise RequestError("protocol", f"request over {MAX_REQUEST} bytes")
        return os.pread(memfd, size, 0)
    finally:
        os.close(memfd)


class RequestError(Exception):
    """A request the zygote refuses (the reply says why); the zygote keeps serving."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(slots=True)
class Worker:
    """A worker or gate handed to the service and not yet reported: its handle (whose pidfd
    the loop watches), the write end of its exit pipe, the deadline its backstop counts from
    and its name in the logs (a turn id, or ``gate:<tool>``)."""

    handle: WorkerHandle | Child
    exit_w: int
    deadline: float
    name: str
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
        registry_factory: RegistryFactory | None,
        *,
        spare: bool = True,
    ) -> None:
        self.sock = sock
        self.settings = settings
        # Every worker is handed this one, as discovered here just before its fork.
        self.discovery = selfcoded.Discovery()
        self.registry_factory = registry_factory or functools.partial(
            build_registry, discovery=self.discovery
        )
        self.context = context_from_settings(settings)
        # The workers' prebuilt Landlock rulesets: this process forks them, so it holds them.
        self.rulesets = sandbox.Rulesets()
        self.keep_spare = spare
        self.spare: Spare | None = None
        self.workers: dict[int, Worker] = {}

    def serve(self) -> None:
        """Answer requests and report exits until the client hangs up, then kill and reap
        every worker."""
        self.sock.setblocking(True)
        try:
            spares.warm_codec()  # before any worker is forked: they all inherit it
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
        """Take the one message waiting; False once the client is gone."""
        try:
            data, fds, flags, _ = socket.recv_fds(self.sock, MAX_MESSAGE, 4)
        except InterruptedError:
            return True
        except OSError as exc:
            log.error("zygote_control_failed", error=str(exc))
            return False
        if not data:
            for fd in fds:
                os.close(fd)
            return False
        self.handle(data, fds, bool(flags & socket.MSG_TRUNC))
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
        return worker.deadline + self.settings.limits.kill_grace_s + BACKSTOP_S

    def look_at_workers(self) -> None:
        """Report every worker that exited (group and cgroup swept, reaped); kill one that ran
        past its backstop."""
        now = time.monotonic()
        for pid, worker in list(self.workers.items()):
            handle = worker.handle
            code = handle.reap(block=False)
            if code is None:
                if not worker.killed_overdue and now >= self.backstop_at(worker):
                    log.warning("worker_killed_overdue", pid=pid, turn_id=worker.name)
                    worker.killed_overdue = True
                    handle.kill()
                continue
            with contextlib.suppress(Exception):
                handle.close()  # the turn's cgroup: stragglers die, the directory goes
            worker.release(code)
            del self.workers[pid]
            log.info("worker_exited", pid=pid, turn_id=worker.name, exit_code=code)

    def handle(self, data: bytes, fds: list[int], truncated: bool) -> None:
        """Carry out one message (never raises for a bad one). ``spawn`` and ``gate`` come with
        the socket their reply goes to (a spawn also with a memfd holding its request);
        ``ping`` is answered on the control socket; ``kill`` and ``close`` get no answer."""
        reply_to: socket.socket | None = None
        seq: Any = None
        one_way = False
        try:
            if truncated:
                raise RequestError("protocol", f"message over {MAX_MESSAGE} bytes")
            try:
                request = msgpack.unpackb(data)
            except (ValueError, msgpack.UnpackException) as exc:
                raise RequestError("protocol", f"not msgpack: {exc}") from exc
            if not isinstance(request, dict):
                raise RequestError("protocol", "a request is a map")
            seq, op = request.get("id"), request.get("op")
            one_way = op in ("kill", "close")
            wanted = _FDS.get(op) if isinstance(op, str) else None
            if not isinstance(op, str) or wanted is None or not isinstance(seq, int):
                raise RequestError("protocol", f"bad id or op: {op!r:.40}")
            if wanted:
                if len(fds) != wanted:
                    raise RequestError("protocol", f"{op} comes with {wanted} descriptors")
                reply_to = socket.socket(fileno=fds.pop(0))
            if reply_to is None:
                if op == "ping":
                    self.reply(self.sock, {**self.ping(), "id": seq, "ok": True})
                else:
                    (self.kill if op == "kill" else self.close)(request)
            elif op == "spawn":
                self.spawn(reply_to, read_request(fds.pop(0)))
            else:
                self.gate(reply_to, request)
        except RequestError as exc:
            self.refuse(reply_to, seq, one_way, exc.kind, str(exc))
        except Exception as exc:
            log.error("zygote_request_failed", error=f"{type(exc).__name__}: {exc}")
            self.refuse(reply_to, seq, one_way, "internal", str(exc))
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if reply_to is not None:
                reply_to.close()

    def refuse(
        self, reply_to: socket.socket | None, seq: Any, one_way: bool, kind: str, error: str
    ) -> None:
        """Say why on the request's own reply socket, else on the control socket (a ping's
        caller waits there); a one-way message is refused only in the log."""
        if one_way:
            log.warning("zygote_request_refused", kind=kind, error=error)
            return
        reply = {"id": seq, "ok": False, "kind": kind, "error": error}
        self.reply(reply_to if reply_to is not None else self.sock, reply)

    @staticmethod
    def reply(to: socket.socket, reply: dict[str, Any], fds: tuple[int, ...] = ()) -> bool:
        """Send ``reply`` (and ``fds``); False if nobody takes it any more."""
        data = msgpack.packb(reply)
        try:
            if fds:
                socket.send_fds(to, [data], list(fds))
            else:
                to.send(data)
        except OSError as exc:
            log.warning("zygote_reply_failed", error=str(exc))
            return False
        return True

    def ping(self) -> dict[str, Any]:
        spare = self.spare
        return {"pid": os.getpid(), "spare": spare.handle.pid if spare is not None else None}

    def spawn(self, reply_to: socket.socket, blob: bytes) -> None:
        """Hand a worker for the encoded request ``blob`` to the service: the spare, or a
        fresh fork; its channel end and exit pipe go back on ``reply_to``."""
        try:
            contract = decode(blob)
        except ContractError as exc:
            raise RequestError("protocol", f"bad request: {exc}") from exc
        if not isinstance(contract, TurnRequest | ResumeRequest):
            raise RequestError("protocol", f"no worker runs a {type(contract).__name__}")
        handle = self.take_spare(contract, blob) if isinstance(contract, TurnRequest) else None
        if handle is None:
            self.discover()
            try:
                if isinstance(contract, TurnRequest):
                    handle = spawn.spawn_turn(
                        contract,
                        self.settings,
                        registry_factory=self.registry_factory,
                        rulesets=self.rulesets,
                    )
                else:
                    handle = spawn.spawn_resume(
                        contract, self.settings, registry_factory=self.registry_factory
                    )
            except SpawnError as exc:
                self.refill()  # no worker for this turn; maybe one for the next
                raise RequestError("spawn", str(exc)) from exc
        try:
            exit_r, exit_w = os.pipe2(os.O_CLOEXEC)
        except OSError as exc:
            self.discard(handle)
            raise RequestError("spawn", f"cannot open the exit pipe: {exc}") from exc
        self.workers[handle.pid] = Worker(handle, exit_w, handle.deadline, handle.turn_id)
        cgroup = handle.cgroup_path
        reply = {"ok": True, "pid": handle.pid, "deadline": handle.deadline, "cgroup": cgroup}
        try:
            if not self.reply(reply_to, reply, (handle.sock.fileno(), exit_r)):
                handle.kill()  # nobody waits for this worker: reaped, reported to nobody
        finally:
            # The service holds the channel now; a copy here would hide the worker's EOF.
            handle.sock.close()
            os.close(exit_r)
            reply_to.close()  # before the next fork: no spare holds the service's reply socket
        # Only now, with the service already talking to this turn's worker: the next spare.
        if self.refill():
            self.rehearse()

    def gate(self, reply_to: socket.socket, request: dict[str, Any]) -> None:
        """Fork a gate's pytest (``launch_pytest``: the confinement, limits and cgroup of a
        gate) and hand the service its output pipe and exit pipe on ``reply_to``."""
        texts = [request.get(key) for key in ("staging", "private", "name")]
        bounds = [request.get(key) for key in ("timeout_s", "address_space_mb", "cpu_s", "cap")]
        numbers = [v for v in bounds if isinstance(v, int | float) and v > 0]
        paths = [v for v in texts if isinstance(v, str)]
        if len(numbers) != 4 or len(paths) != 3 or Path(paths[1]).parent != Path(paths[0]):
            raise RequestError("protocol", "a gate: staging, private dir in it, tool, bounds")
        staging, private, name = paths
        if not name.isidentifier():
            raise RequestError("protocol", "a tool is named by an identifier")
        timeout_s, address_space_mb, cpu_s, cap = numbers
        limits = GateLimits(
            float(timeout_s), int(address_space_mb), int(cpu_s), int(cap), self.settings.sandbox
        )
        try:
            exit_r, exit_w = os.pipe2(os.O_CLOEXEC)
        except OSError as exc:
            raise RequestError("spawn", f"cannot open the exit pipe: {exc}") from exc
        try:
            child = launch_pytest(Path(staging), Path(private), name, limits)
        except OSError as exc:
            os.close(exit_r)
            os.close(exit_w)
            raise RequestError("spawn", f"cannot start pytest: {exc}") from exc
        output = child.output
        assert output is not None
        deadline = time.monotonic() + limits.timeout_s
        self.workers[child.pid] = Worker(child, exit_w, deadline, f"gate:{name}")
        cgroup = str(child.cgroup.path) if child.cgroup is not None else None
        reply = {"ok": True, "pid": child.pid, "cgroup": cgroup}
        try:
            if not self.reply(reply_to, reply, (output.fd, exit_r)):
                child.kill()
        finally:
            # The service reads the output now; a copy here would hide pytest's EOF.
            output.close()
            child.output = None
            os.close(exit_r)

    def discover(self) -> None:
        """Discover live self-coded tools here, before a fork: the worker inherits the result
        and only checks that the toolbox did not change since."""
        try:
            self.discovery(self.context)
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
            handle = spawn.spawn_spare(
                self.settings, registry_factory=self.registry_factory, rulesets=self.rulesets
            )
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
            msgpack.unpackb(msgpack.packb({"op": "spawn", "id": 1}))
            decode(encode(request))
            selfcoded.toolbox_fingerprint(self.context)
            pack_frame(Assignment(encode(request), time.monotonic()))
            msgpack.packb({"ok": True, "pid": 0, "deadline": 0.0, "cgroup": None})

    def take_spare(self, turn: TurnRequest, blob: bytes) -> WorkerHandle | None:
        """The spare, assigned ``turn`` (``blob``, as the service encoded it; deadline fixed
        now); None if there is no usable one, after discarding one that is stale, dead or stuck."""
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
            spares.assign_spare(spare.handle, turn, deadline, blob=blob)
        except Exception as exc:  # SpawnError above all; whatever it is, no turn gets it
            log.warning("spare_lost", pid=spare.handle.pid, turn_id=turn.turn_id, error=str(exc))
            self.discard(spare.handle)
            return None
        return spare.handle

    @staticmethod
    def discard(handle: WorkerHandle | Child) -> None:
        """Kill, reap and close a child no one else owns (a spare; every child at shutdown)."""
        with contextlib.suppress(Exception):
            handle.kill()
            handle.reap(block=True)
        with contextlib.suppress(Exception):
            handle.close()

    def _worker_of(self, request: dict[str, Any]) -> Worker | None:
        pid = request.get("pid")
        return self.workers.get(pid) if isinstance(pid, int) else None

    def kill(self, request: dict[str, Any]) -> None:
        """An unknown pid already exited and was reported."""
        worker = self._worker_of(request)
        if worker is not None:
            worker.handle.kill()

    def close(self, request: dict[str, Any]) -> None:
        """The service is done with a worker: one still running is killed (and reported when
        it is reaped, to nobody). An unknown pid already exited and was reported."""
        worker = self._worker_of(request)
        if worker is not None and worker.handle.reap(block=False) is None:
            worker.handle.kill()

    def shutdown(self) -> None:
        """Kill, reap and close every worker still held, and the spare."""
        spare, self.spare = self.spare, None
        if spare is not None:
            self.discard(spare.handle)
        for worker in list(self.workers.values()):
            self.discard(worker.handle)
            worker.release(worker.handle.exit_code)
        self.workers.clear()
