"""TurnActor: starts one worker per turn (through the zygote), relays its Jobs to the broker,
holds the ceilings outside the worker (model calls, wall clock), and reports TurnEnded.

It never waits for a process: a worker's exit is an event on a descriptor it watches (the exit
pipe the zygote writes once it has reaped the worker), and a worker that does not exit within
``EXIT_GRACE_S`` of its turn's end is killed, its exit still awaited the same way."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

import structlog
from thespian.actors import ActorAddress, ActorExitRequest, WakeupMessage, WatchMessage

from actors.base import ContractActor
from actors.messages import Fatal, JobAnswer, StartResume, StartTurn, TurnEnded, Typing, Wire
from shelldon.config import Settings
from shelldon.contracts import Result, ResumeRequest, TurnRequest
from shelldon.proc.child import SpawnError
from shelldon.rules.turnwatch import (
    Finished,
    Forward,
    TurnWatch,
    Violation,
    apology,
    death_kind,
    max_model_calls,
    oom_baseline,
)
from shelldon.worker.channel import FrameError
from shelldon.worker.spawn import WorkerHandle

log = structlog.get_logger(__name__)

TYPING_AFTER_S = 1.0
EXIT_GRACE_S = 0.5
EXIT_GIVE_UP_S = 5.0
"""After the kill, how long an exit is awaited before the handle is let go unreported (the
zygote still reaps the worker; only its exit code goes unlogged)."""
TYPING_REFRESH_S = 4.5
_EXIT_POLL_S = 0.02
_zygote: Any = None


def use_zygote(zygote: Any) -> None:
    """Fork every worker through ``zygote`` (a ``shelldon.worker.zygote.Zygote``).

    The TurnActor shares its process with the transport and the broker, whose memory holds
    credentials a forked worker must never inherit: it never forks itself.
    """
    global _zygote  # noqa: PLW0603 - one per service process, set before the actors start
    _zygote = zygote


@dataclass(slots=True)
class Exiting:
    """A worker whose turn is over, awaited until its exit is reported: killed at ``kill_at``
    if it still runs, let go at ``give_up_at``."""

    handle: WorkerHandle
    fd: int
    kill_at: float
    give_up_at: float
    killed: bool

    def next_due(self) -> float:
        return self.give_up_at if self.killed else self.kill_at


class TurnActor(ContractActor):
    """Runs at most one worker at a time; the arbiter guarantees it is asked for one."""

    def __init__(self) -> None:
        super().__init__()
        # Every fork of this process is a worker that runs model-written code: it must not
        # keep the key that seals actor messages (it could forge them).
        self.settings: Settings | None = None
        self.peers: dict[str, Any] = {}
        self.handle: WorkerHandle | None = None
        self.exiting: list[Exiting] = []
        self.turnwatch: TurnWatch | None = None
        self.oom_baseline: int | None = None
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
        self.oom_baseline = oom_baseline(_cgroup_of(handle))
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
        if any(e.fd in msg.ready for e in self.exiting):
            self._look_at_exiting()
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
            # No Result can come any more; whatever still runs there (a tool that shut the
            # channel and went on) is killed now, and its exit awaited like any other.
            log.warning("worker_closed_channel_without_result", turn_id=handle.turn_id)
            kind = death_kind(_cgroup_of(handle), self.oom_baseline)
            self._end(self._apology(kind), kill=True)

    def receiveMsg_JobAnswer(self, msg: JobAnswer, sender: ActorAddress) -> None:
        handle = self.handle
        if handle is None or msg.turn_id != handle.turn_id:
            log.info("late_job_answer_dropped", turn_id=msg.turn_id)
            return
        if self.turnwatch is not None:
            self.turnwatch.on_answer(msg.answer)
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

    def _await_exit(self, handle: WorkerHandle, *, killed: bool) -> None:
        """Watch for ``handle``'s exit; close it once reported."""
        now = time.monotonic()
        kill_at = now + EXIT_GRACE_S
        give_up_at = (now if killed else kill_at) + EXIT_GIVE_UP_S
        entry = Exiting(handle, handle.exit_fileno(), kill_at, give_up_at, killed)
        self.exiting.append(entry)
        if entry.fd >= 0:
            self.watch(entry.fd)
        self._wake_for_exits(now)

    def _wake_for_exits(self, now: float) -> None:
        # Exits arrive on watched descriptors; the wake-up holds the kill and give-up times
        # (and polls for a handle with no descriptor to watch).
        if not self.exiting:
            return
        if any(e.fd < 0 for e in self.exiting):
            wait = _EXIT_POLL_S
        else:
            wait = max(0.0, min(e.next_due() for e in self.exiting) - now)
        self.wakeupAfter(dt.timedelta(seconds=wait), payload=("reap",))

    def _look_at_exiting(self, *, from_wakeup: bool = False) -> None:
        """Close each worker whose exit is in; kill one past its grace; let go of one past
        its last chance. Never waits: ``reap(block=False)`` only reads what is there."""
        now, still = time.monotonic(), []
        for entry in self.exiting:
            handle = entry.handle
            code = handle.reap(block=False)
            if code is None and now < entry.give_up_at:
                if not entry.killed and now >= entry.kill_at:
                    log.warning("worker_did_not_exit", turn_id=handle.turn_id, pid=handle.pid)
                    handle.kill()
                    entry.killed = True
                    entry.give_up_at = now + EXIT_GIVE_UP_S
                still.append(entry)
                continue
            if code is None:
                log.error("worker_exit_not_reported", turn_id=handle.turn_id, pid=handle.pid)
            if entry.fd >= 0:
                self.unwatch(entry.fd)
            handle.close()
        self.exiting = still
        if from_wakeup:  # one wake-up chain per awaited exit, not one more per event
            self._wake_for_exits(now)

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: ActorAddress) -> None:
        if msg.payload == ("reap",):
            self._look_at_exiting(from_wakeup=True)
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
        # Killed and let go, not awaited: the zygote reaps them (and sweeps their cgroups).
        handles = [e.handle for e in self.exiting]
        if self.handle is not None:
            handles.append(self.handle)
        for handle in handles:
            handle.kill()
            handle.close()
        self.exiting, self.handle = [], None

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
        # The worker exits right after its Result (or its kill): its exit is awaited from
        # watched descriptors and wake-ups, never by waiting in this handler.
        code = handle.reap(block=False)
        if code is None:
            self._await_exit(handle, killed=kill)
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


def _cgroup_of(handle: WorkerHandle) -> str | None:
    path = getattr(handle, "cgroup_path", None)
    if path is None and handle.cgroup is not None:
        path = str(handle.cgroup.path)
    return path
