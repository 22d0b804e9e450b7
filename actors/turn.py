"""TurnActor: starts one worker per turn (through the zygote), relays its Jobs to the broker,
holds the ceilings outside the worker (model calls, wall clock), and reports TurnEnded.

It never waits for a process: a worker's exit is an event on a descriptor it watches (the exit
pipe the zygote writes once it has reaped the worker), and a worker that does not exit within
a grace after its turn's end is killed, its exit still awaited the same way (when:
``shelldon.rules.exits``)."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

import structlog
from thespian.actors import ActorAddress, ActorExitRequest, WakeupMessage, WatchMessage

from actors.messages import Fatal, JobAnswer, StartTurn, TurnClosed, TurnEnded, Typing, Wire
from actors.wired import WiredActor
from shelldon.contracts import Result, ResumeRequest, TurnRequest
from shelldon.proc.child import SpawnError
from shelldon.proc.oom import death_kind, oom_baseline
from shelldon.rules.effects import Resume
from shelldon.rules.exits import AwaitedExit, Verdict, next_wake
from shelldon.rules.turnwatch import (
    Finished,
    Forward,
    TurnWatch,
    Violation,
    apology,
    max_model_calls,
)
from shelldon.worker.channel import FrameError
from shelldon.worker.handle import Worker
from shelldon.worker.remote import PendingSpawn, ZygoteWorkerHandle
from shelldon.worker.zygote import REQUEST_TIMEOUT_S, Zygote

log = structlog.get_logger(__name__)

TYPING_AFTER_S = 1.0
TYPING_REFRESH_S = 4.5


@dataclass(slots=True)
class Exiting:
    """A worker whose turn is over, its exit descriptor, and when it is killed or let go."""

    handle: Worker
    fd: int
    awaited: AwaitedExit


class TurnActor(WiredActor):
    """Runs at most one worker at a time; the arbiter guarantees it is asked for one."""

    def __init__(self) -> None:
        super().__init__()
        self.zygote: Zygote | None = None
        self.handle: Worker | None = None
        self.pending: PendingSpawn[ZygoteWorkerHandle] | None = None
        self.exiting: list[Exiting] = []
        self.turnwatch: TurnWatch | None = None
        self.oom_baseline: int | None = None
        self.chat_id = 0
        self.source = "owner"
        self.started = 0.0
        self.note = ""  # the fallback's note for this run's reply, told once

    def wired(self, msg: Wire, *, first: bool) -> None:
        self.zygote = msg.boot.zygote

    def receiveMsg_StartTurn(self, msg: StartTurn, sender: ActorAddress) -> None:
        self._start(msg.request, msg.request.source)

    def receiveMsg_Resume(self, msg: Resume, sender: ActorAddress) -> None:
        self._start(msg.request, "owner")

    def _start(self, request: TurnRequest | ResumeRequest, source: str) -> None:
        """Ask the zygote for the turn's worker (this process holds the transport's and the
        broker's secrets: it never forks); it arrives on a watched descriptor."""
        turn_id = request.turn_id
        if self.handle is not None or self.pending is not None:
            running = self.handle.turn_id if self.handle is not None else "(starting)"
            log.error("turn_while_busy", running=running, refused=turn_id)
            self._report(request.chat_id, source, apology(turn_id, "crash"))
            return
        self.chat_id, self.source, self.started = request.chat_id, source, time.monotonic()
        self.note = ""
        try:
            if self.zygote is None:
                raise SpawnError("no zygote to fork the worker: this process never forks")
            self.pending = self.zygote.begin_turn(request)
        except SpawnError as exc:
            self._spawn_failed(turn_id, exc)
            return
        self.watch(self.pending.fileno())
        self.wakeupAfter(dt.timedelta(seconds=REQUEST_TIMEOUT_S), payload=("spawn", turn_id))

    def _spawned(self, pending: PendingSpawn[ZygoteWorkerHandle]) -> None:
        try:
            handle = pending.poll()
        except SpawnError as exc:
            self._spawn_failed(pending.turn_id, exc)
            return
        if handle is not None:
            self.unwatch(pending.fileno())
            self.pending = None
            self._run(handle)

    def _spawn_failed(self, turn_id: str, exc: SpawnError) -> None:
        if self.pending is not None:
            self.unwatch(self.pending.fileno())
            self.pending.close()
            self.pending = None
        log.error("worker_spawn_failed", turn_id=turn_id, error=str(exc))
        self._report(self.chat_id, self.source, apology(turn_id, "crash"))
        if self.zygote is not None and not self.zygote.alive():
            # A new zygote cannot be made clean once secrets are in memory: stop, and let
            # systemd start the service afresh (every turn would only apologize).
            self.send(self.peers["supervisor"], Fatal(f"the worker zygote is gone: {exc}", 1))

    def _run(self, handle: Worker) -> None:
        settings = self.settings
        assert settings is not None and self.store is not None, "TurnActor used before Wire"
        self.handle = handle
        self.oom_baseline = oom_baseline(handle.cgroup_path)
        lim = settings.limits
        self.turnwatch = TurnWatch(
            handle.turn_id,
            handle.deadline,
            max_model_calls(lim.max_tool_executions),
            lim.kill_grace_s,
            frozenset(tool.name for tool in self.store.tools.approved()),
        )
        self.watch(handle.fileno())
        self.wakeupAfter(
            dt.timedelta(seconds=max(0.0, handle.deadline + lim.kill_grace_s - time.monotonic())),
            payload=("deadline", handle.turn_id),
        )
        # A turn that answers within a second needs no "typing…"; a longer one shows it.
        self.wakeupAfter(dt.timedelta(seconds=TYPING_AFTER_S), payload=("typing", handle.turn_id))

    def receiveMsg_WatchMessage(self, msg: WatchMessage, sender: ActorAddress) -> None:
        if self.pending is not None and self.pending.fileno() in msg.ready:
            self._spawned(self.pending)
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
                for failure in verdict.dropped:
                    # Only a worker that lies sends these: nothing it says is charged.
                    log.warning(
                        "worker_fault_failure_dropped",
                        turn_id=handle.turn_id,
                        tool=failure.name,
                        call_id=failure.call_id,
                    )
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
            kind = death_kind(handle.cgroup_path, self.oom_baseline)
            self._end(self._apology(kind), kill=True)

    def receiveMsg_JobAnswer(self, msg: JobAnswer, sender: ActorAddress) -> None:
        handle, turnwatch = self.handle, self.turnwatch
        if handle is None or turnwatch is None or msg.turn_id != handle.turn_id:
            log.info("late_job_answer_dropped", turn_id=msg.turn_id)
            return
        turnwatch.on_answer(msg.answer)
        self.note = self.note or msg.note
        try:
            handle.send(msg.answer)
        except FrameError as exc:
            log.warning("worker_channel_broken", turn_id=handle.turn_id, error=str(exc))
            self._end(self._apology("crash"), kill=True)

    def _typing(self, turn_id: str) -> None:
        """Show "typing…" while the worker runs (Telegram shows it for about five seconds)."""
        if self.chat_id:
            self.send(self.peers["transport"], Typing(self.chat_id))
            self.wakeupAfter(dt.timedelta(seconds=TYPING_REFRESH_S), payload=("typing", turn_id))

    def _await_exit(self, handle: Worker, *, killed: bool) -> None:
        """Watch for ``handle``'s exit; close it once reported."""
        now = time.monotonic()
        entry = Exiting(handle, handle.exit_fileno(), AwaitedExit.starting(now, killed=killed))
        self.exiting.append(entry)
        if entry.fd >= 0:
            self.watch(entry.fd)
        self._wake_for_exits(now)

    def _wake_for_exits(self, now: float) -> None:
        # Exits arrive on watched descriptors; the wake-up holds the kill and give-up times
        # (and polls for a handle with no descriptor to watch).
        awaited = [e.awaited for e in self.exiting]
        wait = next_wake(awaited, now, all_watched=all(e.fd >= 0 for e in self.exiting))
        if wait is not None:
            self.wakeupAfter(dt.timedelta(seconds=wait), payload=("reap", ""))

    def _look_at_exiting(self, *, from_wakeup: bool = False) -> None:
        """Close each worker whose exit is in; kill one past its grace; let go of one past
        its last chance. Never waits: ``reap(block=False)`` only reads what is there."""
        now, still = time.monotonic(), []
        for entry in self.exiting:
            handle = entry.handle
            verdict = entry.awaited.look(now, exited=handle.reap(block=False) is not None)
            if verdict is Verdict.KILL:
                log.warning("worker_did_not_exit", turn_id=handle.turn_id, pid=handle.pid)
                handle.kill()
            if verdict in (Verdict.KILL, Verdict.WAIT):
                still.append(entry)
                continue
            if verdict is Verdict.GIVE_UP:
                log.error("worker_exit_not_reported", turn_id=handle.turn_id, pid=handle.pid)
            if entry.fd >= 0:
                self.unwatch(entry.fd)
            handle.close()
        self.exiting = still
        if from_wakeup:  # one wake-up chain per awaited exit, not one more per event
            self._wake_for_exits(now)

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: ActorAddress) -> None:
        kind, turn_id = msg.payload
        pending, handle, turnwatch = self.pending, self.handle, self.turnwatch
        if kind == "reap":
            self._look_at_exiting(from_wakeup=True)
        elif kind == "spawn" and pending is not None and pending.turn_id == turn_id:
            assert self.zygote is not None  # it was asked for this worker
            self.zygote.abandon(f"no worker for turn {turn_id} in {REQUEST_TIMEOUT_S} s")
            self._spawn_failed(turn_id, SpawnError("the zygote did not answer"))
        elif handle is None or turnwatch is None or handle.turn_id != turn_id:
            return  # the turn is over (Thespian cannot cancel a wake-up)
        elif kind == "typing":
            self._typing(turn_id)
        elif kind == "deadline":
            self._deadline(handle, turnwatch)

    def _deadline(self, handle: Worker, turnwatch: TurnWatch) -> None:
        if turnwatch.overdue(time.monotonic()):
            log.warning(
                "worker_overran_deadline",
                turn_id=handle.turn_id,
                pid=handle.pid,
                blamed=turnwatch.blamed(),
            )
            self._end(self._apology("timeout"), kill=True)
        else:
            remaining = handle.deadline + turnwatch.grace_s - time.monotonic()
            wait = dt.timedelta(seconds=max(0.05, remaining))
            self.wakeupAfter(wait, payload=("deadline", handle.turn_id))

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: ActorAddress) -> None:
        # Killed and let go, not awaited: the zygote reaps them (and sweeps their cgroups).
        if self.pending is not None:
            self.pending.close()
            self.pending = None
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
        return apology(handle.turn_id, kind, watch)

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
        self._report(self.chat_id, self.source, result, self.note)

    def _report(self, chat_id: int, source: str, result: Result, note: str = "") -> None:
        # The photos lent to the turn are dropped.
        self.send(self.peers["broker"], TurnClosed(result.turn_id))
        self.send(self.peers["arbiter"], TurnEnded(chat_id, result, source, note))
