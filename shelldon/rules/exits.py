"""When a worker whose turn is over is killed or let go: plain values in, verdicts out.

A worker exits right after its Result (or its kill). Its owner watches for the exit and asks
``look`` on every event and wake-up: one still running ``EXIT_GRACE_S`` after its turn ended is
killed, and one whose exit is not reported ``EXIT_GIVE_UP_S`` after that is let go unreported
(its parent still reaps it; only its exit code goes unlogged).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

EXIT_GRACE_S = 0.5
EXIT_GIVE_UP_S = 5.0
EXIT_POLL_S = 0.02
"""How often an exit is looked for when there is no descriptor to watch."""


class Verdict(Enum):
    """What to do with an awaited worker now."""

    WAIT = "wait"
    KILL = "kill"
    CLOSE = "close"
    GIVE_UP = "give_up"


@dataclass(slots=True)
class AwaitedExit:
    """A worker whose turn is over: killed at ``kill_at`` if it still runs, let go at
    ``give_up_at``."""

    kill_at: float
    give_up_at: float
    killed: bool

    @classmethod
    def starting(cls, now: float, *, killed: bool) -> AwaitedExit:
        """Awaited from ``now``; ``killed``: the kill was already sent."""
        kill_at = now + EXIT_GRACE_S
        return cls(kill_at, (now if killed else kill_at) + EXIT_GIVE_UP_S, killed)

    def next_due(self) -> float:
        return self.give_up_at if self.killed else self.kill_at

    def look(self, now: float, *, exited: bool) -> Verdict:
        """The verdict at ``now``; a KILL moves the give-up time to ``EXIT_GIVE_UP_S`` ahead."""
        if exited:
            return Verdict.CLOSE
        if now >= self.give_up_at:
            return Verdict.GIVE_UP
        if not self.killed and now >= self.kill_at:
            self.killed = True
            self.give_up_at = now + EXIT_GIVE_UP_S
            return Verdict.KILL
        return Verdict.WAIT


def next_wake(awaited: list[AwaitedExit], now: float, *, all_watched: bool) -> float | None:
    """Seconds until the next look is due without an event (None: nothing is awaited)."""
    if not awaited:
        return None
    if not all_watched:
        return EXIT_POLL_S
    return max(0.0, min(a.next_due() for a in awaited) - now)
