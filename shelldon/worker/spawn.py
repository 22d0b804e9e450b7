"""The per-turn fork: one worker process per turn, talking frames over a socketpair.

``spawn_turn`` / ``spawn_resume`` fork a child that first takes its first steps
(``shelldon.worker.prepare``), then builds the registry and runs the loop. Protocol on the
channel: the child sends ``Job``; the parent answers ``Completion`` or ``JobFailed``; the child
finally sends one ``Result`` and exits. The child always ends in ``os._exit`` — returning into
the caller would clone the actor that forked it. The parent owns the ``WorkerHandle``
(``shelldon.worker.handle``): it kills, reaps (this pid only) and closes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import gc
import math
import os
import socket
import time
from collections.abc import Callable
from typing import NoReturn

import structlog

from shelldon.config import Settings
from shelldon.contracts import Result, ResumeRequest, TurnRequest
from shelldon.proc import sandbox
from shelldon.proc.child import Child, SpawnError
from shelldon.worker.approved import run_approved
from shelldon.worker.channel import send_frame, send_packed
from shelldon.worker.handle import EXIT_CHANNEL, EXIT_CRASH, EXIT_OK, WorkerHandle
from shelldon.worker.loop import Ask, run_resume, run_turn
from shelldon.worker.prepare import prepare_child
from shelldon.worker.relay import channel_announce, channel_ask, result_frame
from shelldon.worker.spare import SPARE_TURN_ID, NoAssignment, await_assignment, rehearse_assignment
from shelldon.worker.tools import Registry, build_registry

log = structlog.get_logger(__name__)

CRASH_REPLY = "Sorry — something broke inside me during this turn. Please try again."

RegistryFactory = Callable[[Settings], Registry]

TurnBody = Callable[[Registry, Ask, float, Callable[[], None]], Result]
"""A worker's turn: (registry, ask, deadline, confine_rest) → its Result. ``confine_rest``
closes the confinement a resumed worker opened only part-way for its approved call."""


def _worker_main(
    sock: socket.socket,
    parent_pid: int,
    settings: Settings,
    turn_id: str,
    deadline: float,
    body: TurnBody | None,
    registry_factory: RegistryFactory,
    confinement: sandbox.Confinement,
    network: bool,
) -> NoReturn:
    """The child's whole life; every path ends in ``os._exit``. ``body`` None: a spare, which
    prepares, builds its registry, then waits for its Assignment."""
    code = EXIT_CRASH
    failure: BaseException | None = None
    try:
        registry: Registry | None = None
        try:
            prepare_child(
                sock.fileno(), parent_pid, settings, turn_id, confinement, network=network
            )
            registry = registry_factory(settings)
        except BaseException as exc:
            if body is not None:
                raise
            failure = exc  # a spare apologizes once it knows to which turn
        if body is None:
            rehearse_assignment()
            request, deadline = await_assignment(sock)
            turn_id = request.turn_id
            structlog.contextvars.bind_contextvars(turn_id=turn_id)
            body = _turn_body(request, settings)
            if failure is not None:
                raise failure
        assert registry is not None
        # The parent kills at deadline + grace; waiting that long for an answer is never wrong.
        wait_until = deadline + settings.limits.kill_grace_s
        registry.announce = channel_announce(sock, turn_id, wait_until)
        ask = channel_ask(sock, turn_id, wait_until)
        confine_rest = functools.partial(sandbox.confine_worker, confinement, network=False)
        frame = result_frame(body(registry, ask, deadline, confine_rest))
        code = EXIT_CHANNEL
        send_packed(sock, frame, wait_until)
        code = EXIT_OK
    except NoAssignment as exc:
        # A spare whose parent hung up or sent garbage: no turn was ever its own.
        code = EXIT_CHANNEL
        with contextlib.suppress(BaseException):
            log.info("spare_not_assigned", error=str(exc))
            if failure is not None:
                log.error("worker_crashed", error=f"{type(failure).__name__}: {failure}")
    except BaseException as exc:
        # The apology goes first: logging itself may be what broke.
        if code == EXIT_CRASH:
            with contextlib.suppress(BaseException):
                send_frame(sock, Result(turn_id, CRASH_REPLY), time.monotonic() + 1.0)
        with contextlib.suppress(BaseException):
            event = "worker_crashed" if code == EXIT_CRASH else "result_not_sent"
            log.error(event, error=f"{type(exc).__name__}: {exc}")
    finally:
        os._exit(code)


def _turn_body(request: TurnRequest, settings: Settings) -> TurnBody:
    def body(registry: Registry, ask: Ask, deadline: float, _: Callable[[], None]) -> Result:
        return run_turn(request, registry, ask, settings, deadline)

    return body


def above_stdio(sock: socket.socket) -> socket.socket:
    """``sock`` on a descriptor above 2, so the child's stdio never aliases its channel (only
    a parent started with stdio closed gets a socket on 0-2; it is moved, not refused)."""
    if sock.fileno() > 2:
        return sock
    moved = fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD_CLOEXEC, 3)
    sock.close()
    return socket.socket(fileno=moved)


def _spawn(
    turn_id: str,
    settings: Settings,
    body: TurnBody | None,
    registry_factory: RegistryFactory,
    *,
    network: bool = False,
    rulesets: sandbox.Rulesets | None = None,
) -> WorkerHandle:
    # A spare (body None) has no deadline until its Assignment fixes one.
    deadline = time.monotonic() + settings.limits.turn_timeout_s if body is not None else math.inf
    try:
        parent_end, child_end = socket.socketpair()
        parent_end, child_end = above_stdio(parent_end), above_stdio(child_end)
    except OSError as exc:
        raise SpawnError(f"cannot open the worker channel: {exc}") from exc
    # Prepared here so the worker only makes syscalls: filter built, paths listed, cgroup made.
    confinement = sandbox.prepare_worker(settings, rulesets)
    cgroup = confinement.cgroup
    parent_pid = os.getpid()

    def child_body() -> None:  # pragma: no cover - the child; covered by the parent's asserts
        try:
            # Inherited objects must never be collected here: a finalizer would close an fd
            # number the worker may have reused by then. (Its own process group is set by
            # Child.fork: whatever its tools fork dies with it.)
            gc.freeze()
            parent_end.close()
        finally:
            _worker_main(
                child_end,
                parent_pid,
                settings,
                turn_id,
                deadline,
                body,
                registry_factory,
                confinement,
                network,
            )

    try:
        proc = Child.fork(child_body, cgroup=cgroup)
    except SpawnError as exc:
        parent_end.close()
        child_end.close()
        if cgroup is not None:
            cgroup.close()
        raise SpawnError(f"cannot start a worker: {exc}") from exc
    pid = proc.pid
    child_end.close()
    # A worker that makes a PID namespace joins its cgroup itself, before the fork that makes
    # it: an adoption from here could move only the stub.
    if cgroup is not None and not network and not confinement.plan.pidns:
        try:
            cgroup.adopt(pid)
        except OSError as exc:
            log.warning("cgroup_not_joined", turn_id=turn_id, error=str(exc))
    parent_end.setblocking(False)
    log.info("spare_spawned" if body is None else "worker_spawned", pid=pid, turn_id=turn_id)
    return WorkerHandle(
        pid=pid, sock=parent_end, deadline=deadline, turn_id=turn_id, cgroup=cgroup, proc=proc
    )


def spawn_turn(
    request: TurnRequest,
    settings: Settings,
    *,
    registry_factory: RegistryFactory = build_registry,
    rulesets: sandbox.Rulesets | None = None,
) -> WorkerHandle:
    """Fork a worker that runs ``request`` and sends Jobs, then one Result, on the channel."""
    body = _turn_body(request, settings)
    return _spawn(request.turn_id, settings, body, registry_factory, rulesets=rulesets)


def spawn_spare(
    settings: Settings,
    *,
    registry_factory: RegistryFactory = build_registry,
    rulesets: sandbox.Rulesets | None = None,
) -> WorkerHandle:
    """Fork a plain-turn worker ahead of its turn (the zygote keeps one): prepared, confined
    (network off), in its turn's cgroup, registry built, then blocked on its channel until its
    ``Assignment`` (``shelldon.worker.spare``); from there it runs as a worker forked for that
    turn. Its ``turn_id`` is ``SPARE_TURN_ID`` and its deadline infinite until assigned."""
    return _spawn(SPARE_TURN_ID, settings, None, registry_factory, rulesets=rulesets)


def spawn_resume(
    request: ResumeRequest,
    settings: Settings,
    *,
    registry_factory: RegistryFactory = build_registry,
) -> WorkerHandle:
    """Fork a worker that resumes a parked turn after the owner's decision."""
    # Prepared here, in the parent, as the worker's own confinement is.
    call_confinement = sandbox.prepare_call(settings)

    def body(
        registry: Registry, ask: Ask, deadline: float, confine_rest: Callable[[], None]
    ) -> Result:
        return run_resume(
            request,
            registry,
            ask,
            settings,
            deadline,
            confine=confine_rest,
            run_approved=functools.partial(run_approved, confinement=call_confinement),
        )

    return _spawn(request.turn_id, settings, body, registry_factory, network=request.approved)
