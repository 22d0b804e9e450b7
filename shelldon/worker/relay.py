"""The worker's side of its channel as the loop uses it: ``ask`` (a Job for a Completion),
``announce`` (a self-coded tool is about to run) and the one Result frame."""

from __future__ import annotations

import socket
from collections.abc import Callable

import structlog

from shelldon.contracts import Completion, Job, JobFailed, Result, ToolCall, ToolStarted
from shelldon.worker.channel import FrameError, FrameTimeout, pack_frame, recv_frame, send_frame
from shelldon.worker.loop import Ask

log = structlog.get_logger(__name__)


def channel_announce(
    sock: socket.socket, turn_id: str, wait_until: float
) -> Callable[[ToolCall], None]:
    """Tell the parent which self-coded call is about to run (no answer is awaited)."""

    def announce(call: ToolCall) -> None:
        try:
            send_frame(sock, ToolStarted(turn_id, call.name, call.id), wait_until)
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


TOO_BIG_REPLY = (
    "Sorry — this turn's result grew too large to hand back. Please ask again in smaller steps."
)


def result_frame(result: Result) -> bytes:
    """The frame for ``result``; one too big for the channel becomes an apology with its counts,
    and its ops go too (a parked call that cannot be handed back is never run)."""
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
