"""The actor-side ceilings of one turn (DESIGN invariant 5), as a plain state machine.

The worker counts its own tool executions and watches its own clock, but a self-coded tool can
patch anything in its process. So the side that relays the worker's frames counts model calls
and holds the wall clock too: a worker that asks for one model call too many, sends a frame it
has no business sending, or outlives its deadline plus a grace period is killed, and the owner
gets a best-effort reply instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from shelldon.contracts import Completion, Job, Message, Result, Role, ToolFailure, ToolStarted
from shelldon.replies import stopped_apology


@dataclass(frozen=True, slots=True)
class Forward:
    """Relay this Job (its deadline clamped to the turn's) to the broker."""

    job: Job


@dataclass(frozen=True, slots=True)
class Finished:
    """The worker finished the turn with this Result, its failures cut to those a strike may
    follow (``TurnWatch.chargeable``); ``dropped`` are the ones the worker had no grounds for."""

    result: Result
    dropped: tuple[ToolFailure, ...] = ()


@dataclass(frozen=True, slots=True)
class Violation:
    """The worker broke a ceiling or the protocol: kill it and apologise. ``kind`` picks the
    apology (``replies.APOLOGIES``: "ceiling" or "protocol"); ``reason`` is for the log."""

    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class Noted:
    """Nothing to do: the frame only told us something (a self-coded tool started)."""


Verdict = Forward | Finished | Violation | Noted


class TurnWatch:
    """Counts one turn's model calls and holds its deadline; decides what each frame means.

    Blame is charged from this side's own record, never from the worker's word alone: the
    calls the model asked for (``on_answer``) are the only ones a failure or a hang may name,
    each at most once. ``self_coded`` names the tools the owner approved (the only ones a
    strike can hit)."""

    def __init__(
        self,
        turn_id: str,
        deadline: float,
        max_model_calls: int,
        grace_s: float,
        self_coded: frozenset[str] = frozenset(),
    ):
        self.turn_id = turn_id
        self.deadline = deadline
        self.max_model_calls = max_model_calls
        self.grace_s = grace_s
        self.self_coded = self_coded
        self.model_calls = 0
        self.done = False
        self.relayed: set[tuple[str, str]] = set()  # every (call id, tool) the model asked for
        self.round: dict[str, str] = {}  # the latest answer's calls, until the next Job
        self.started: set[str] = set()  # calls of the round the worker said it started
        self.told_ok: dict[str, bool] = {}  # call id → ok, as the worker told the model

    def on_answer(self, answer: object) -> None:
        """The model's answer on its way to the worker: its calls are the only ones the worker
        may say it runs next, or blame anything on."""
        calls = answer.tool_calls if isinstance(answer, Completion) else ()
        self.round = {call.id: call.name for call in calls}
        self.relayed.update(self.round.items())
        self.started = set()

    def on_frame(self, frame: object) -> Verdict:
        """Judge one frame from the worker."""
        if self.done:
            return Violation("protocol", "the worker sent a frame after its result")
        if isinstance(frame, ToolStarted):
            if self.round.get(frame.call_id) != frame.name or frame.call_id in self.started:
                # A strike for a tool the model never called would hit an innocent one.
                return Violation(
                    "protocol", f"announced {frame.name!r} ({frame.call_id!r}), not a call due"
                )
            self.started.add(frame.call_id)
            return Noted()
        if isinstance(frame, Job):
            self._note_answers(frame.messages)
            self.round, self.started = {}, set()  # the worker moved on: no call is running
            if frame.turn_id != self.turn_id:
                return Violation("protocol", f"job for another turn ({frame.turn_id!r})")
            self.model_calls += 1
            if self.model_calls > self.max_model_calls:
                return Violation(
                    "ceiling",
                    f"model call {self.model_calls} refused: the ceiling is "
                    f"{self.max_model_calls} per turn",
                )
            return Forward(replace(frame, deadline=min(frame.deadline, self.deadline)))
        if isinstance(frame, Result):
            self.done = True
            if frame.turn_id != self.turn_id:
                return Violation("protocol", f"result for another turn ({frame.turn_id!r})")
            kept = self.chargeable(frame.tool_failures)
            dropped = list(frame.tool_failures)
            for failure in kept:
                dropped.remove(failure)
            return Finished(replace(frame, tool_failures=kept), tuple(dropped))
        return Violation("protocol", f"unexpected {type(frame).__name__} frame from the worker")

    def _note_answers(self, messages: tuple[Message, ...]) -> None:
        # The results of the latest round close the conversation the worker sends.
        for message in reversed(messages):
            if message.role is not Role.TOOL:
                break
            if message.tool_call_id in self.round:
                self.told_ok[message.tool_call_id] = not message.is_error

    def chargeable(self, failures: tuple[ToolFailure, ...]) -> tuple[ToolFailure, ...]:
        """The failures a strike may follow: each names a self-coded call this side relayed,
        by its id and tool, once, and not one the worker told the model had succeeded."""
        kept: dict[tuple[str, str], ToolFailure] = {}
        for failure in failures:
            call = (failure.call_id, failure.name)
            if (
                call in self.relayed
                and failure.name in self.self_coded
                and self.told_ok.get(failure.call_id) is not True
                and call not in kept
            ):
                kept[call] = failure
        return tuple(kept.values())

    def blamed(self) -> str:
        """The tool a hang is blamed on: the one self-coded call of the running round, when
        the worker said it started; "" where more than one could have been running (the
        worker's word cannot tell them apart) or none was."""
        candidates = [call for call, name in self.round.items() if name in self.self_coded]
        if len(candidates) == 1 and candidates[0] in self.started:
            return candidates[0]
        return ""

    def overdue(self, now: float) -> bool:
        """Whether the worker has outlived its deadline plus the grace period."""
        return now > self.deadline + self.grace_s


def max_model_calls(max_tool_executions: int) -> int:
    """Model calls one turn may make: one per tool round, plus the final answer."""
    return max_tool_executions + 1


BLAMED_KINDS = frozenset({"timeout", "memory", "crash"})
"""Stops a running tool can cause; a broken protocol or ceiling is the worker's own conduct."""


def apology(turn_id: str, kind: str, watch: TurnWatch | None = None) -> Result:
    """The best-effort Result the owner gets when a worker had to be stopped; for a stop a tool
    can cause, the self-coded call ``watch`` blames (``TurnWatch.blamed``) is reported as
    failed (a strike)."""
    failures: tuple[ToolFailure, ...] = ()
    reply = stopped_apology(kind)
    call = watch.blamed() if watch is not None and kind in BLAMED_KINDS else ""
    if watch is not None and call:
        name = watch.round[call]
        why = {
            "timeout": "it ran past the turn's time limit",
            "memory": "it needed more memory than a turn may have",
        }.get(kind, f"the worker died ({kind})")
        failures = (ToolFailure(name, f"stopped: {why}", call),)
        reply = f"{reply} (My tool {name} was running and didn't finish.)"
    model_calls = watch.model_calls if watch is not None else 0
    return Result(turn_id=turn_id, reply=reply, tool_failures=failures, model_calls=model_calls)
