"""TurnActor: forks one worker per turn, relays its Jobs to the broker, holds the ceilings
outside the worker (model calls, wall clock), reaps it, and reports TurnEnded. Kept lean: it
imports no provider SDK, so a fork from it is cheap."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import structlog
from thespian.actors import ActorAddress, ActorExitRequest, WakeupMessage, WatchMessage

from actors.base import ContractActor
from actors.messages import Fatal, JobAnswer, StartResume, StartTurn, TurnEnded, Typing, Wire
from shelldon.config import Settings
from shelldon.contracts import Result, ResumeRequest, TurnRequest
from shelldon.core.turnwatch import (
    Finished,
    Forward,
    TurnWatch,
    Violation,
    apology,
    max_model_calls,
)
from shelldon.worker.channel import FrameError
from shelldon.worker.spawn import SpawnError, WorkerHandle

log = structlog.get_logger(__name__)

TYPING_AFTER_S = 1.0
EXIT_GRACE_S = 0.5
TYPING_REFRESH_S = 4.5
_zygote: Any = None


def use_zygote(zygote: Any) -> None:
    """Fork every worker through ``zygote`` (a ``shelldon.worker.zygote.Zygote``).

    The TurnActor shares its process with the transport and the broker, whose memory holds
    credentials a forked worker must never inherit: it never forks itself.
    """
    global _zygote  # noqa: PLW0603 - one per service process, set before the actors start
    _zygote = zygote


class TurnActor(ContractActor):
    """Runs at most one worker at a time; the arbiter guarantees it is asked for one."""

    def __init__(self) -> None:
        super().__init__()
        # Every fork of this process is a worker that runs model-written code: it must not
        # keep the key that seals actor messages (it could forge them).
        self.settings: Settings | None = None
        self.peers: dict[str, Any] = {}
        self.handle: WorkerHandle | None = None
        self.exiting: list[tuple[WorkerHandle, float]] = []
        self.turnwatch: TurnWatch | None = None
        self.chat_id = 0
        self.source = "owner"
        self.started = 0.0

    def receiveMsg_Wire(self, msg: Wire, sender: ActorAddress) -> None:
        self.settings = msg.settings
        self.peers = msg.peers

    def receiveMsg_StartTurn(self, msg: StartTurn, sender: ActorAddress) -> None:
        req = msg.request
        self._start(req.turn_id, req.chat_id, req.source, req)

    def receiveMsg_StartResume(self, msg: StartResume, sender: ActorAddress) -> None:
        req = msg.request
        self._start(req.turn_id, req.chat_id, "owner", req)

    def _spawn(self, request: TurnRequest | ResumeRequest, settings: Settings) -> WorkerHandle:
        """A worker for ``request``, forked by the zygote (this process holds the transport's
        and the broker's secrets: it never forks)."""
        zygote = _zygote
        if zygote is None:
            raise SpawnError("no zygote to fork the worker: this process never forks")
        if isinstance(request, ResumeRequest):
            resumed: WorkerHandle = zygote.spawn_resume(request)
            return resumed
        spawned: WorkerHandle = zygote.spawn_turn(request)
        return spawned

    def _start(
        self, turn_id: str, chat_id: int, source: str, request: TurnRequest | ResumeRequest
    ) -> None:
        settings = self.settings
        assert settings is not None, "TurnActor used before Wire"
        if self.handle is not None:
            log.error("turn_while_busy", running=self.handle.turn_id, refused=turn_id)
            self._report(chat_id, source, apology(turn_id, "crash"))
            return
        self.chat_id, self.source, self.started = chat_id, source, time.monotonic()
        try:
            handle = self._spawn(request, settings)
        except SpawnError as exc:
            log.error("worker_spawn_failed", turn_id=turn_id, error=str(exc))
            self._report(chat_id, source, apology(turn_id, "crash"))
            if _zygote is not None and not _zygote.alive():
                # A new zygote cannot be made clean once secrets are in memory: stop, and let
                # systemd start the service afresh (every turn would only apologize).
                self.send(self.peers["supervisor"], Fatal(f"the worker zygote is gone: {exc}", 1))
            return
        self.handle = handle
        lim = settings.limits
        self.turnwatch = TurnWatch(
            turn_id, handle.deadline, max_model_calls(lim.max_tool_executions), lim.kill_grace_s
        )
        self.watch(handle.fileno())
        self.wakeupAfter(
            dt.timedelta(seconds=max(0.0, handle.deadline + lim.kill_grace_s - time.monotonic())),
            payload=turn_id,
        )
        # A turn that answers within a second needs no "typing…"; a longer one shows it.
        self.wakeupAfter(dt.timedelta(seconds=TYPING_AFTER_S), payload=("typing", turn_id))

    def receiveMsg_WatchMessage(self, msg: WatchMessage, sender: ActorAddress) -> None:
        handle, turnwatch = self.handle, self.turnwatch
        if handle is None or turnwatch is None or handle.fileno() not in msg.ready:
            return
        try:
            frames = handle.read_frames()
        except FrameError as exc:
            log.warning("worker_sent_garbage", turn_id=handle.turn_id, error=str(exc))
            self._end(self._apology("protocol"), kill=True)
            return
        for frame in frames:
            verdict = turnwatch.on_frame(frame)
            if isinstance(verdict, Forward):
                self.send(self.peers["broker"], verdict.job)
            elif isinstance(verdict, Finished):
                self._end(verdict.result, kill=False)
                return
            elif isinstance(verdict, Violation):
                log.warning(
                    "worker_violation",
                    turn_id=handle.turn_id,
                    kind=verdict.kind,
                    reason=verdict.reason,
                )
                self._end(self._apology(verdict.kind), kill=True)
                return
        if handle.eof:
            code = handle.reap(block=True)
            log.warning("worker_died_without_result", turn_id=handle.turn_id, exit_code=code)
            self._end(self._apology("crash"), kill=True)

    def receiveMsg_JobAnswer(self, msg: JobAnswer, sender: ActorAddress) -> None:
        handle = self.handle
        if handle is None or msg.turn_id != handle.turn_id:
            log.info("late_job_answer_dropped", turn_id=msg.turn_id)
            return
        try:
            handle.send(msg.answer)
        except FrameError as exc:
            log.warning("worker_channel_broken", turn_id=handle.turn_id, error=str(exc))
            self._end(self._apology("crash"), kill=True)

    def _typing(self) -> None:
        """Show "typing…" while the worker runs (Telegram shows it for about five seconds)."""
        if self.handle is not None and self.chat_id and "transport" in self.peers:
            self.send(self.peers["transport"], Typing(self.chat_id))
            self.wakeupAfter(
                dt.timedelta(seconds=TYPING_REFRESH_S), payload=("typing", self.handle.turn_id)
            )

    def _reap_exiting(self) -> None:
        still = []
        for handle, kill_at in self.exiting:
            if handle.reap(block=False) is None:
                if time.monotonic() < kill_at:
                    still.append((handle, kill_at))
                    continue
                log.warning("worker_did_not_exit", turn_id=handle.turn_id, pid=handle.pid)
                handle.kill()
                handle.reap(block=True)  # SIGKILLed: returns at once
            handle.close()
        self.exiting = still
        if still:
            self.wakeupAfter(dt.timedelta(seconds=0.02), payload=("reap",))

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: ActorAddress) -> None:
        if msg.payload == ("reap",):
            self._reap_exiting()
            return
        if isinstance(msg.payload, tuple):
            if self.handle is not None and msg.payload == ("typing", self.handle.turn_id):
                self._typing()
            return
        handle, turnwatch = self.handle, self.turnwatch
        if handle is None or turnwatch is None or msg.payload != handle.turn_id:
            return
        if turnwatch.overdue(time.monotonic()):
            log.warning(
                "worker_overran_deadline",
                turn_id=handle.turn_id,
                pid=handle.pid,
                running_tool=turnwatch.running_tool,
            )
            self._end(self._apology("timeout"), kill=True)
        else:
            remaining = handle.deadline + turnwatch.grace_s - time.monotonic()
            self.wakeupAfter(dt.timedelta(seconds=max(0.05, remaining)), payload=handle.turn_id)

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: ActorAddress) -> None:
        for handle, _kill_at in self.exiting:
            handle.kill()
            handle.reap(block=True)
            handle.close()
        self.exiting = []
        if self.handle is not None:
            self.handle.kill()
            self.handle.reap(block=True)
            self.handle.close()
            self.handle = None

    def _apology(self, kind: str) -> Result:
        handle, watch = self.handle, self.turnwatch
        assert handle is not None and watch is not None
        return apology(handle.turn_id, kind, watch.model_calls, watch.running_tool)

    def _end(self, result: Result, *, kill: bool) -> None:
        handle = self.handle
        assert handle is not None
        self.unwatch(handle.fileno())
        if kill:
            handle.kill()
        # A SIGKILLed worker is reaped at once (no waiting on it); one that sent its Result
        # is given a moment from wake-ups below.
        code = handle.reap(block=kill)
        if code is None:
            # The worker exits right after its Result: reap it from a wake-up, never by waiting
            # in this handler; past EXIT_GRACE_S it is killed.
            self.exiting.append((handle, time.monotonic() + EXIT_GRACE_S))
            self.wakeupAfter(dt.timedelta(seconds=0.005), payload=("reap",))
        else:
            handle.close()
        self.handle, self.turnwatch = None, None
        log.info(
            "turn_finished",
            turn_id=result.turn_id,
            exit_code=code,
            model_calls=result.model_calls,
            tool_executions=result.tool_executions,
            ms=round((time.monotonic() - self.started) * 1000, 1),
        )
        self._report(self.chat_id, self.source, result)

    def _report(self, chat_id: int, source: str, result: Result) -> None:
        self.send(self.peers["arbiter"], TurnEnded(chat_id, result, source))
