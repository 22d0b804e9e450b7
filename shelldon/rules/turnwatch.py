"""The actor-side ceilings of one turn (DESIGN invariant 5), as a plain state machine.

The worker counts its own tool executions and watches its own clock, but a self-coded tool can
patch anything in its process. So the side that relays the worker's frames counts model calls
and holds the wall clock too: a worker that asks for one model call too many, sends a frame it
has no business sending, or outlives its deadline plus a grace period is killed, and the owner
gets a best-effort reply instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from shelldon.contracts import Completion, Job, Result, ToolFailure, ToolStarted
from shelldon.replies import stopped_apology


@dataclass(frozen=True, slots=True)
class Forward:
    """Relay this Job (its deadline clamped to the turn's) to the broker."""

    job: Job


@dataclass(frozen=True, slots=True)
class Finished:
    """The worker finished the turn with this Result."""

    result: Result


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
    """Counts one turn's model calls and holds its deadline; decides what each frame means."""

    def __init__(self, turn_id: str, deadline: float, max_model_calls: int, grace_s: float):
        self.turn_id = turn_id
        self.deadline = deadline
        self.max_model_calls = max_model_calls
        self.grace_s = grace_s
        self.model_calls = 0
        self.done = False
        self.running_tool = ""
        self.requested: frozenset[str] = frozenset()

    def on_answer(self, answer: object) -> None:
        """The model's answer on its way to the worker: the tools it asked for are the only
        ones the worker may say it runs next (this side's own record, not the worker's word)."""
        calls = answer.tool_calls if isinstance(answer, Completion) else ()
        self.requested = frozenset(call.name for call in calls)

    def on_frame(self, frame: object) -> Verdict:
        """Judge one frame from the worker."""
        if self.done:
            return Violation("protocol", "the worker sent a frame after its result")
        if isinstance(frame, ToolStarted):
            if frame.name not in self.requested:
                # A strike for a tool the model never called would hit an innocent one.
                return Violation("protocol", f"announced {frame.name!r}, which was not called")
            self.running_tool = frame.name
            return Noted()
        if isinstance(frame, Job):
            self.running_tool = ""  # the tool before it finished: the worker moved on
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
            self.running_tool = ""
            if frame.turn_id != self.turn_id:
                return Violation("protocol", f"result for another turn ({frame.turn_id!r})")
            return Finished(frame)
        return Violation("protocol", f"unexpected {type(frame).__name__} frame from the worker")

    def overdue(self, now: float) -> bool:
        """Whether the worker has outlived its deadline plus the grace period."""
        return now > self.deadline + self.grace_s


def max_model_calls(max_tool_executions: int) -> int:
    """Model calls one turn may make: one per tool round, plus the final answer."""
    return max_tool_executions + 1


def apology(turn_id: str, kind: str, model_calls: int = 0, running_tool: str = "") -> Result:
    """The best-effort Result the owner gets when a worker had to be stopped; a self-coded tool
    that was running when it was stopped is reported as failed (it earns a strike)."""
    failures: tuple[ToolFailure, ...] = ()
    reply = stopped_apology(kind)
    if running_tool:
        why = {
            "timeout": "it ran past the turn's time limit",
            "memory": "it needed more memory than a turn may have",
        }.get(kind, f"the worker died ({kind})")
        failures = (ToolFailure(running_tool, f"stopped: {why}", self_coded=True),)
        reply = f"{reply} (My tool {running_tool} was running and didn't finish.)"
    return Result(turn_id=turn_id, reply=reply, tool_failures=failures, model_calls=model_calls)
