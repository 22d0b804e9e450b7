"""The spare's protocol: a worker forked ahead of its turn waits on its channel for an
``Assignment`` (its request, as ``encode`` made it, and the deadline fixed at that moment) and
answers with one ``ASSIGNMENT_ACK`` byte before any frame; ``assign_spare`` is the parent's side.
The acknowledgement tells a live spare from one that died while idle but was not yet reaped."""

from __future__ import annotations

import contextlib
import select
import socket
import time

import structlog

from shelldon.contracts import (
    Assignment,
    Completion,
    ContractError,
    JobFailed,
    Message,
    Role,
    ToolCall,
    TurnRequest,
    Usage,
    decode,
    encode,
)
from shelldon.proc.child import SpawnError
from shelldon.worker.channel import FrameError, recv_frame, send_frame
from shelldon.worker.handle import WorkerHandle

log = structlog.get_logger(__name__)

SPARE_TURN_ID = "spare"
"""The turn id a spare logs under until its Assignment names the real one."""

ASSIGN_WAIT_S = 2.0
"""Longest the parent waits to hand a spare its Assignment (a spare still starting up, a large
request); past it the spare is taken for stuck and the turn gets a fresh worker."""

ASSIGNMENT_ACK = b"\x06"
"""A spare's one-byte answer to its Assignment, before any frame."""

_ASSIGNMENT_READ_S = 5.0
"""Once an Assignment's first byte is in, how long a spare waits for the rest of it."""


def rehearse_assignment() -> None:
    """Receive and acknowledge one made-up Assignment over a throwaway socketpair, so the first
    run of that code (copy-on-write faults, the interpreter's first-call work) happens while
    the spare is idle, not after its turn arrives. Failures only cost that head start."""
    with contextlib.suppress(Exception):
        warm_codec()
        ours, theirs = socket.socketpair()
        with ours, theirs:
            request = TurnRequest(SPARE_TURN_ID, 0, "")
            send_frame(theirs, Assignment(encode(request), 0.0), time.monotonic() + 1.0)
            await_assignment(ours)  # the real path: poll, frame, request decoded, ack
            theirs.recv(len(ASSIGNMENT_ACK))


class NoAssignment(Exception):
    """A spare's channel closed or carried something other than its Assignment."""


def await_assignment(sock: socket.socket) -> tuple[TurnRequest, float]:
    """Block until the parent hands this spare its turn (the request and its deadline). The
    wait is a plain ``poll`` with no timeout: an idle spare spins nothing, spends no CPU."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    while not poller.poll():  # EINTR is retried by poll itself (PEP 475)
        pass
    try:
        frame = recv_frame(sock, time.monotonic() + _ASSIGNMENT_READ_S)
    except FrameError as exc:
        raise NoAssignment(str(exc)) from exc
    if not isinstance(frame, Assignment):
        raise NoAssignment(f"expected an Assignment, got {type(frame).__name__}")
    try:
        request = decode(frame.request)
    except ContractError as exc:
        raise NoAssignment(f"the assigned request is malformed: {exc}") from exc
    if not isinstance(request, TurnRequest):
        raise NoAssignment(f"expected a TurnRequest, got {type(request).__name__}")
    try:
        sock.sendall(ASSIGNMENT_ACK)
    except OSError as exc:
        raise NoAssignment(f"cannot acknowledge the assignment: {exc}") from exc
    return request, frame.deadline


def warm_codec() -> None:
    """Decode one of each contract a worker receives (an Assignment carrying a request with a
    tool call in its history, a Completion, a JobFailed), so the codec's per-class checkers
    (built on first use, ~0.5 ms each family) already exist in every worker forked after it.
    Called once by a process that forks workers (the zygote), before it forks them, and by a
    spare before it waits: there it also takes the copy-on-write faults of that path early."""
    call = ToolCall("w", "w", {})
    usage = Usage()
    request = TurnRequest("w", 0, "w", (Message(Role.ASSISTANT, "w", (call,)),))
    samples = (
        request,
        Assignment(encode(request), 0.0),
        Completion("w", (call,), usage),
        JobFailed("w", "w", "w"),
    )
    for sample in samples:
        decode(encode(sample))


def assign_spare(
    handle: WorkerHandle,
    request: TurnRequest,
    deadline: float,
    *,
    wait_s: float = ASSIGN_WAIT_S,
    blob: bytes | None = None,
) -> None:
    """Hand the spare behind ``handle`` its turn and wait for its acknowledgement; the handle
    then carries the turn's id and ``deadline``. Raises ``SpawnError`` if the spare is gone
    (exited, killed, its channel shut) or has not acknowledged within ``wait_s`` (a spare still
    starting up gets that long): the caller discards it. ``blob``: ``request`` already encoded
    (the zygote passes on the service's bytes)."""
    if handle.reap(block=False) is not None:
        raise SpawnError(f"the spare exited while idle ({handle.exit_code})")
    until = time.monotonic() + wait_s
    try:
        blob = encode(request) if blob is None else blob
        send_frame(handle.sock, Assignment(blob, deadline), until)
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
