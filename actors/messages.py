"""Messages the actors pass among themselves (the contracts ride inside them).

Plain frozen dataclasses. Every actor shares the service's one process (``actors.system``), so
a message is handed over as it is, never pickled; frozen, so no actor changes one another holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shelldon.config import Settings

if TYPE_CHECKING:
    from shelldon.worker.zygote import Zygote
from shelldon.contracts import (
    Completion,
    JobFailed,
    Photo,
    ProposeTool,
    RequestToolApproval,
    Result,
    TurnRequest,
)

# The rules' effects that are one message to one peer (``shelldon.rules.effects``: Say, Strike,
# Resume…) travel as they are: ``actors.arbiter.SENDS`` lists them with their peer.


@dataclass(frozen=True, slots=True)
class Wire:
    """Supervisor → every actor at start (and after a restart): what the service was booted
    with, and the peers' addresses."""

    boot: Boot
    peers: dict[str, Any] = field(default_factory=dict)
    # True in the wiring at service start; False when re-wiring after an actor's restart.
    fresh: bool = True


@dataclass(frozen=True, slots=True)
class InboxChanged:
    """Transport → arbiter: new events were durably handed off to the inbox table."""


CONSOLE_DONE = b"done"
"""What the console transport writes to the session's done pipe when the session ended well."""

CONSOLE_FAILED = b"fail"
"""... and when it ended early because something failed (the demo's story could not go on)."""

TOOL_REFUSED = "tool_refused"
"""``Say.kind`` of a proposed tool that was refused or failed its gate: nothing to promote."""


@dataclass(frozen=True, slots=True)
class Typing:
    """→ transport: show the typing indicator while a turn runs."""

    chat_id: int


@dataclass(frozen=True, slots=True)
class StartTurn:
    """Arbiter → turn actor: run a fresh turn."""

    request: TurnRequest


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """Turn actor → arbiter: the turn is over (the worker is reaped)."""

    chat_id: int
    result: Result
    source: str = "owner"
    # The fallback provider answered some of it: the owner reads this line once, under it.
    note: str = ""


@dataclass(frozen=True, slots=True)
class ParkApproval:
    """→ arbiter (the owner of parked rows): park a RISKY call and ask the owner."""

    turn_id: str
    chat_id: int
    op: RequestToolApproval


@dataclass(frozen=True, slots=True)
class GateTool:
    """Arbiter → gate runner: stage and gate a proposed tool; ``round`` is its repair round
    (0: not made by a repair turn), from the arbiter's records."""

    turn_id: str
    chat_id: int
    proposal: ProposeTool
    round: int = 0


@dataclass(frozen=True, slots=True)
class QuarantineDue:
    """Strike ledger → gate runner (the toolbox's owner): a tool reached the strike threshold."""

    chat_id: int
    name: str
    strikes: int
    last_error: str


@dataclass(frozen=True, slots=True)
class Ping:
    """Main process → supervisor: a health probe, answered with ``Status``."""


@dataclass(frozen=True, slots=True)
class JobAnswer:
    """Broker → turn actor: the provider's answer to a worker's Job."""

    turn_id: str
    answer: Completion | JobFailed
    note: str = ""  # set when the fallback provider answered (``shelldon.broker.fallback``)


@dataclass(frozen=True, slots=True)
class PhotoBytes:
    """Transport → broker: the bytes of a photo the owner sent, kept in the broker's memory
    (never in sqlite, never in a worker) for the turn that names ``photo.key``."""

    photo: Photo
    data: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class TurnClosed:
    """Turn actor → broker: turn ``turn_id`` is over; what it held for it (a photo) goes."""

    turn_id: str


@dataclass(frozen=True, slots=True)
class PeerRestarted:
    """Supervisor → every actor: ``role`` was restarted (its address is in the next Wire)."""

    role: str


@dataclass(frozen=True, slots=True)
class Boot:
    """Main process → supervisor: start every actor with these settings."""

    settings: Settings
    transport: str = "telegram"
    console_fds: tuple[int, ...] = ()
    story: tuple[tuple[str, bool], ...] = ()
    auto_yes: bool = False
    # What forks workers and gate runs: this process holds secrets and never forks.
    zygote: Zygote | None = None


@dataclass(frozen=True, slots=True)
class Fatal:
    """→ supervisor: the service cannot go on (bad token, another instance, no zygote)."""

    reason: str
    exit_status: int = 1


@dataclass(frozen=True, slots=True)
class Status:
    """Supervisor's answer to Ping from the main process: ready, and why it must stop if so;
    ``polling`` once the transport takes updates (the cue for systemd's READY=1)."""

    ready: bool
    fatal: str = ""
    exit_status: int = 0
    restarts: int = 0
    peers: dict[str, Any] = field(default_factory=dict)
    polling: bool = False


@dataclass(frozen=True, slots=True)
class TransportPolling:
    """Transport → supervisor: the transport is taking updates (Telegram: past its first
    round trip, command registration; console: session open)."""


@dataclass(frozen=True, slots=True)
class Crash:
    """A supervision drill: the actor that gets it raises, as a bug in one of its handlers
    would, and so stops and is restarted (tests of "let it crash"; only the actors' own
    process can send it)."""

    why: str = "supervision drill"
