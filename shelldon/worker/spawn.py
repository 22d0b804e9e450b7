"""The per-turn fork: one worker process per turn, talking frames over a socketpair.

``spawn_turn`` / ``spawn_resume`` fork a child that, before anything else, freezes what it
inherited (signals back to default, every descriptor but the channel and stdio closed, the
environment cut to an allowlist, RLIMITs applied, ``confine()``), then builds the registry and
runs the loop. Protocol on the channel: the child sends ``Job``; the parent answers
``Completion`` or ``JobFailed``; the child finally sends one ``Result`` and exits. The child
always ends in ``os._exit`` — returning into the caller would clone the actor that forked it.

The parent owns the ``WorkerHandle``: it kills (SIGKILL), reaps (``waitpid`` on this pid only;
``waitpid(-1)`` would steal the actor system's children) and closes it.

``spawn_spare`` forks a plain-turn worker ahead of its turn (the zygote keeps one): it does all
of the above up to the registry, then blocks on its channel (no CPU) until ``assign_spare``
sends it an ``Assignment`` (the request and the deadline fixed at that moment). The spare
answers with one ``ASSIGNMENT_ACK`` byte, read by ``assign_spare`` before the channel is handed
on (so whoever gets it sees frames only), and from there runs exactly as a worker forked for
that turn: one turn, then it dies. The acknowledgement is what tells a live spare from one that
died while idle but was not yet reaped.
"""

from __future__ import annotations

import _signal
import contextlib
import fcntl
import gc
import math
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import structlog

from shelldon.config import Settings
from shelldon.contracts import (
    MAX_BLOB_BYTES,
    Assignment,
    Completion,
    Job,
    JobFailed,
    Message,
    Result,
    ResumeRequest,
    Role,
    ToolCall,
    ToolStarted,
    TurnRequest,
    Usage,
    decode,
    encode,
)
from shelldon.proc import sandbox
from shelldon.proc.child import EXIT_UNKNOWN, Child, SpawnError, die_with_parent
from shelldon.proc.limits import ProcessLimits, apply_limits
from shelldon.secrets import forget_env_secrets
from shelldon.worker.approved import confined_runner
from shelldon.worker.channel import (
    HEADER,
    FrameError,
    FrameReader,
    FrameTimeout,
    pack_frame,
    recv_frame,
    send_frame,
    send_packed,
)
from shelldon.worker.loop import Ask, run_resume, run_turn
from shelldon.worker.tools import Registry, build_registry

log = structlog.get_logger(__name__)

ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "TZ")
"""The only environment variables a worker keeps; everything else (secrets above all) goes."""

EXIT_OK = 0
EXIT_CRASH = 1
EXIT_CHANNEL = 3
"""Worker exit codes: Result sent; crashed (apology attempted); Result could not be sent.
(``EXIT_UNKNOWN``, from ``shelldon.proc.child``: something other than its handle reaped it.)"""

SPARE_TURN_ID = "spare"
"""The turn id a spare logs under until its Assignment names the real one."""

ASSIGN_WAIT_S = 2.0
"""Longest the parent waits to hand a spare its Assignment (a spare still starting up, a large
request); past it the spare is taken for stuck and the turn gets a fresh worker."""

ASSIGNMENT_ACK = b"\x06"
"""A spare's one-byte answer to its Assignment, before any frame."""

_ASSIGNMENT_READ_S = 5.0
"""Once an Assignment's first byte is in, how long a spare waits for the rest of it."""

CRASH_REPLY = "Sorry — something broke inside me during this turn. Please try again."

RegistryFactory = Callable[[Settings], Registry]
_READ_CHUNK = 1 << 16
_READ_BUDGET = 2 * (MAX_BLOB_BYTES + HEADER.size)


@dataclass(slots=True)
class WorkerHandle:
    """The parent's side of one worker: its pid, the non-blocking channel end, the deadline,
    and the process itself (``proc``, a ``Child``: kill, reap and release go through it).

    ``kill()``, ``reap()`` and ``close()`` are idempotent; use it as a context manager to get
    all three on exit.
    """

    pid: int
    sock: socket.socket
    deadline: float
    turn_id: str
    exit_code: int | None = None
    reader: FrameReader = field(default_factory=FrameReader)
    eof: bool = False
    cgroup: sandbox.TurnCgroup | None = None
    proc: Child | None = None

    def fileno(self) -> int:
        """The channel's descriptor (what the TurnActor watches for readability)."""
        return self.sock.fileno()

    def exit_fileno(self) -> int:
        """A descriptor that becomes readable once the worker has exited (a pidfd), so its
        owner can watch for the exit instead of waiting; -1 where the kernel has none."""
        return self.proc.exit_fileno() if self.proc is not None else -1

    def send(self, obj: Any) -> None:
        """Answer the worker with one frame (Completion or JobFailed); raises ``FrameError``."""
        send_frame(self.sock, obj, self.deadline)

    def read_frames(self) -> list[Any]:
        """Every whole frame readable now, without blocking; sets ``eof`` when the child closed.

        Raises ``FrameError`` on garbage from the child or a frame cut off by EOF.
        """
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


# ------------------------------------------------------------------ the child's first steps


# Computed once in the parent: signal.valid_signals() builds ~60 enums (~0.6 ms) per call.
_CATCHABLE = tuple(
    int(sig) for sig in signal.valid_signals() if sig not in (signal.SIGKILL, signal.SIGSTOP)
)
_IGNORED_AT_START = (int(signal.SIGPIPE), int(signal.SIGXFSZ))


def reset_signals() -> None:
    """Give every catchable signal its start-up disposition and unblock them all.

    The actor's handlers must not run in the worker. SIGPIPE and SIGXFSZ stay ignored, as
    Python sets them at start-up, so a write to a closed channel is an error, not a death.
    """
    for sig in _CATCHABLE:
        handler = _signal.SIG_IGN if sig in _IGNORED_AT_START else _signal.SIG_DFL
        # _signal is the C module under signal: the same syscall without the enum wrapping
        # that costs ~6 µs a call. Every signal is set, even where Python's table says it is
        # already default: a handler set outside Python (faulthandler's) is not in that table.
        try:
            _signal.signal(sig, handler)
        except (OSError, ValueError):
            continue
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def close_inherited_fds(keep: int, *also: int) -> None:
    """Close every descriptor except 0, 1, 2, ``keep`` (the channel) and ``also`` (prebuilt
    confinement rulesets, consumed before any tool runs)."""
    kept = sorted({fd for fd in (keep, *also) if fd > 2})
    top = max(os.sysconf("SC_OPEN_MAX"), kept[-1] + 2 if kept else 4)
    # closerange uses the close_range syscall where the kernel has it: one call, any fd count.
    start = 3
    for fd in kept:
        if fd > start:
            os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, top)


def reopen_stdio() -> None:
    """Point ``sys.stdout``/``sys.stderr`` at descriptors 1 and 2 if they wrapped another fd.

    A stream object inherited from the parent may write to a descriptor the worker just closed
    (a capture file, a redirected log); logging through it would crash the turn.
    """
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        try:
            ours = stream.fileno() == fd
        except (AttributeError, OSError, ValueError):
            ours = False
        if not ours:
            replacement = open(  # noqa: SIM115 - lives as long as the worker, closed by _exit
                fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False
            )
            setattr(sys, name, replacement)


def scrub_environment() -> None:
    """Replace ``os.environ`` (and the C environment under it) with the allowlisted variables."""
    for name in [name for name in os.environ if name not in ENV_ALLOWLIST]:
        del os.environ[name]  # os.environ's __delitem__ also unsetenv()s the C environment


def confine(c: sandbox.Confinement, *, network: bool = False, join_cgroup: bool = False) -> None:
    """Kernel confinement hook (seccomp / Landlock or namespaces / a cgroup per turn).

    Called in every worker after descriptors, environment and RLIMITs are set and before any
    tool is imported or run, applying what the parent prepared (``c``). ``network=True`` is a
    resumed turn's first step (its approved RISKY call runs next); a second call closes the rest.
    """
    sandbox.confine_worker(c, network=network, join_cgroup=join_cgroup)


def prepare_child(
    keep_fd: int,
    parent_pid: int,
    settings: Settings,
    turn_id: str,
    confinement: sandbox.Confinement,
    *,
    network: bool = False,
) -> None:
    """Everything the worker does before it trusts itself to run a turn, in this order."""
    reset_signals()
    # The parent died before this took effect: nobody will read our Result.
    die_with_parent(parent_pid, EXIT_CHANNEL)
    # Not dumpable (also when forked by a parent that is): the children it forks for tools
    # and approved calls cannot open its /proc/<pid>/mem, environ or fd/.
    sandbox.forbid_dumps()
    # Its cgroup, then a PID namespace of its own: from here on nothing it runs can name a
    # process outside its turn, and whatever it starts dies with it. The process that called
    # this stays outside as a stub that holds nothing and mirrors the exit.
    sandbox.isolate_pids(confinement, orphan_exit=EXIT_CHANNEL)
    close_inherited_fds(keep_fd, *confinement.keep_fds())
    reopen_stdio()
    scrub_environment()
    # Relative paths a self-coded tool uses land in the workspace (the one place it may write).
    with contextlib.suppress(OSError):
        os.chdir(settings.workspace)
    # Defense in depth: a forking process that once read a secret from its environment still
    # holds it in shelldon.secrets; the worker lets go of it before any tool runs.
    forget_env_secrets()
    lim = settings.limits
    apply_limits(ProcessLimits(address_space_mb=lim.rlimit_as_mb, cpu_s=lim.rlimit_cpu_s))
    # A plain turn runs a tool only after the parent's first Completion, by which time the
    # parent has moved it into the cgroup; a resume runs its approved call at once, so it
    # joins by itself first.
    confine(confinement, network=network, join_cgroup=network)
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(actor="worker", turn_id=turn_id)


def channel_announce(sock: socket.socket, turn_id: str, wait_until: float) -> Callable[[str], None]:
    """Tell the parent which self-coded tool is about to run (no answer is awaited)."""

    def announce(name: str) -> None:
        try:
            send_frame(sock, ToolStarted(turn_id, name), wait_until)
        except FrameError as exc:
            log.warning("channel_failed", error=str(exc))

    return announce


def channel_ask(sock: socket.socket, turn_id: str, wait_until: float) -> Ask:
    """The loop's ``ask`` over the channel; a broken or wrong frame becomes JobFailed("channel")."""

    def ask(job: Job) -> Completion | JobFailed:
        try:
            send_frame(sock, job, wait_until)
            answer = recv_frame(sock, wait_until)
        except FrameTimeout as exc:
            log.warning("channel_timed_out", error=str(exc))
            return JobFailed(turn_id, "timeout", str(exc))
        except FrameError as exc:
            log.warning("channel_failed", error=str(exc))
            return JobFailed(turn_id, "channel", str(exc))
        if not isinstance(answer, Completion | JobFailed):
            problem = f"expected Completion or JobFailed, got {type(answer).__name__}"
            log.warning("channel_failed", error=problem)
            return JobFailed(turn_id, "channel", problem)
        return answer

    return ask


TurnBody = Callable[[Registry, Ask, float, Callable[[], None]], Result]
"""A worker's turn: (registry, ask, deadline, confine_rest) → its Result. ``confine_rest``
closes the confinement a resumed worker opened only part-way for its approved call."""

TOO_BIG_REPLY = (
    "Sorry — this turn's result grew too large to hand back. Please ask again in smaller steps."
)


def result_frame(result: Result) -> bytes:
    """The frame for ``result``; one too big for the channel becomes an apology with its counts.

    Its ops go too (a parked call that cannot be handed back is never run).
    """
    try:
        return pack_frame(result)
    except FrameError as exc:
        log.error("result_too_big", error=str(exc))
        return pack_frame(
            Result(
                result.turn_id,
                TOO_BIG_REPLY,
                tool_failures=result.tool_failures[:20],
                model_calls=result.model_calls,
                tool_executions=result.tool_executions,
                usage=result.usage,
            )
        )


def _worker_main(
    sock: socket.socket,
    parent_pid: int,
    settings: Settings,
    turn_id: str,
    deadline: float,
    body: TurnBody | None,
    registry_factory: RegistryFactory,
    confinement: sandbox.Confinement,
    network: bool = False,
) -> NoReturn:
    """The child's whole life; every path ends in ``os._exit``.

    ``body`` None: a spare, which prepares, builds its registry, then waits for its Assignment.
    """
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
            _rehearse_assignment()
            assignment = _await_assignment(sock)
            request = assignment.request
            turn_id, deadline = request.turn_id, assignment.deadline
            structlog.contextvars.bind_contextvars(turn_id=turn_id)
            body = _turn_body(request, settings)
            if failure is not None:
                raise failure
        assert registry is not None
        registry.announce = channel_announce(sock, turn_id, deadline + settings.limits.kill_grace_s)
        # The parent kills at deadline + grace; waiting that long for an answer is never wrong.
        ask = channel_ask(sock, turn_id, deadline + settings.limits.kill_grace_s)
        frame = result_frame(body(registry, ask, deadline, lambda: confine(confinement)))
        code = EXIT_CHANNEL
        send_packed(sock, frame, deadline + settings.limits.kill_grace_s)
        code = EXIT_OK
    except _NoAssignment as exc:
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


def _rehearse_assignment() -> None:
    """Receive and acknowledge one made-up Assignment over a throwaway socketpair, so the first
    run of that code (copy-on-write faults, the interpreter's first-call work) happens while
    the spare is idle, not after its turn arrives. Failures only cost that head start."""
    with contextlib.suppress(Exception):
        warm_codec()
        ours, theirs = socket.socketpair()
        with ours, theirs:
            request = TurnRequest(SPARE_TURN_ID, 0, "")
            send_frame(theirs, Assignment(request, 0.0), time.monotonic() + 1.0)
            ours.setblocking(False)
            recv_frame(ours, time.monotonic() + 1.0)
            ours.send(ASSIGNMENT_ACK)
            theirs.recv(len(ASSIGNMENT_ACK))


class _NoAssignment(Exception):
    """A spare's channel closed or carried something other than its Assignment."""


def _await_assignment(sock: socket.socket) -> Assignment:
    """Block until the parent hands this spare its turn. The wait is a plain ``poll`` with no
    timeout: an idle spare spins nothing and spends none of its RLIMIT_CPU."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    while not poller.poll():  # EINTR is retried by poll itself (PEP 475)
        pass
    try:
        frame = recv_frame(sock, time.monotonic() + _ASSIGNMENT_READ_S)
    except FrameError as exc:
        raise _NoAssignment(str(exc)) from exc
    if not isinstance(frame, Assignment):
        raise _NoAssignment(f"expected an Assignment, got {type(frame).__name__}")
    try:
        sock.sendall(ASSIGNMENT_ACK)
    except OSError as exc:
        raise _NoAssignment(f"cannot acknowledge the assignment: {exc}") from exc
    return frame


def _turn_body(request: TurnRequest, settings: Settings) -> TurnBody:
    def body(registry: Registry, ask: Ask, deadline: float, _: Callable[[], None]) -> Result:
        return run_turn(request, registry, ask, settings, deadline)

    return body


def above_stdio(sock: socket.socket) -> socket.socket:
    """``sock`` on a descriptor above 2, so the child's stdio never aliases its channel.

    Only a parent started with stdio closed gets a socket on 0-2; it is moved, not refused.
    """
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
) -> WorkerHandle:
    # A spare (body None) has no deadline until its Assignment fixes one.
    deadline = time.monotonic() + settings.limits.turn_timeout_s if body is not None else math.inf
    try:
        parent_end, child_end = socket.socketpair()
        parent_end, child_end = above_stdio(parent_end), above_stdio(child_end)
    except OSError as exc:
        raise SpawnError(f"cannot open the worker channel: {exc}") from exc
    # Prepared here so the worker only makes syscalls: filter built, paths listed, cgroup made.
    confinement = sandbox.prepare_worker(settings)
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
) -> WorkerHandle:
    """Fork a worker that runs ``request`` and sends Jobs, then one Result, on the channel."""
    return _spawn(request.turn_id, settings, _turn_body(request, settings), registry_factory)


def warm_codec() -> None:
    """Decode one of each contract a worker receives (an Assignment carrying a request with a
    tool call in its history, a Completion, a JobFailed), so the codec's per-class checkers
    (built on first use, ~0.5 ms each family) already exist in every worker forked after it.
    Called once by a process that forks workers (the zygote), before it forks them, and by a
    spare before it waits: there it also takes the copy-on-write faults of that path early."""
    call = ToolCall("w", "w", {})
    usage = Usage()
    samples = (
        Assignment(TurnRequest("w", 0, "w", (Message(Role.ASSISTANT, "w", (call,)),)), 0.0),
        Completion("w", (call,), usage),
        JobFailed("w", "w", "w"),
    )
    for sample in samples:
        decode(encode(sample))


def spawn_spare(
    settings: Settings, *, registry_factory: RegistryFactory = build_registry
) -> WorkerHandle:
    """Fork a plain-turn worker ahead of its turn: prepared, confined (network off), in its
    turn's cgroup, registry built, then blocked on its channel until ``assign_spare``.

    The handle's ``turn_id`` is ``SPARE_TURN_ID`` and its deadline infinite until assigned.
    """
    return _spawn(SPARE_TURN_ID, settings, None, registry_factory)


def assign_spare(
    handle: WorkerHandle, request: TurnRequest, deadline: float, *, wait_s: float = ASSIGN_WAIT_S
) -> None:
    """Hand the spare behind ``handle`` its turn and wait for its acknowledgement; the handle
    then carries the turn's id and ``deadline``. Raises ``SpawnError`` if the spare is gone
    (exited, killed, its channel shut) or has not acknowledged within ``wait_s`` (a spare still
    starting up gets that long): the caller discards it."""
    if handle.reap(block=False) is not None:
        raise SpawnError(f"the spare exited while idle ({handle.exit_code})")
    until = time.monotonic() + wait_s
    try:
        send_frame(handle.sock, Assignment(request, deadline), until)
        # Only the ack byte is read: the Job the spare may already have sent stays queued.
        poller = select.poll()
        poller.register(handle.sock.fileno(), select.POLLIN)
        ack = b""
        while not ack:
            left = until - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no acknowledgement within {wait_s} s")
            if not poller.poll(max(1, int(left * 1000) + 1)):
                continue
            try:
                ack = handle.sock.recv(len(ASSIGNMENT_ACK))
            except (BlockingIOError, InterruptedError):
                continue
            if not ack:
                raise ConnectionError("the spare closed its channel")
    except (FrameError, OSError) as exc:
        raise SpawnError(f"the spare did not take its assignment: {exc}") from exc
    if ack != ASSIGNMENT_ACK:
        raise SpawnError(f"the spare answered its assignment with {ack!r}")
    handle.turn_id = request.turn_id
    handle.deadline = deadline
    log.info("spare_assigned", pid=handle.pid, turn_id=request.turn_id)


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
        # The approved call runs in its own child, confined for what it needs (the workspace,
        # the network only if it must); the worker closes its own confinement right after,
        # before the model goes on.
        return run_resume(
            request,
            registry,
            ask,
            settings,
            deadline,
            confine=confine_rest,
            run_approved=confined_runner(call_confinement),
        )

    return _spawn(request.turn_id, settings, body, registry_factory, network=request.approved)
