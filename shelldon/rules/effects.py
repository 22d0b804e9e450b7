"""The arbiter's effects: frozen values the ArbiterActor carries out in order (send a message,
take or write a sqlite row). One that is a message to one peer is sent as it is: the actors'
vocabulary (``actors.messages``) holds these very values."""

from __future__ import annotations

from dataclasses import dataclass

from shelldon.contracts import (
    Decision,
    Op,
    Photo,
    ProposeTool,
    ResumeRequest,
    ToolCall,
    ToolFailure,
)


@dataclass(frozen=True, slots=True)
class TakeRow:
    """Mark inbox row ``item_id`` taken (durably by ``turn_id`` when it starts a turn)."""

    item_id: int
    turn_id: str = ""


@dataclass(frozen=True, slots=True)
class Say:
    """Send ``text`` to the owner; its first ``markdown_chars`` characters are the model's
    Markdown (rendered by a transport that can), the rest is sent as written. ``kind`` says
    what it reports ("" a chat reply; ``actors.messages.TOOL_REFUSED``), so the console's demo
    can tell without reading the text."""

    chat_id: int
    text: str
    markdown_chars: int = 0
    kind: str = ""


@dataclass(frozen=True, slots=True)
class AskOwner:
    """An approval keyboard for a parked RISKY call (``call`` set), a tool promotion
    (``proposal`` set) or, with ``failed``, a failed gate's "Try to fix" / "Drop" card;
    ``turn_id`` goes into the callback data, ``text`` is the plain one-line question. A
    replacement's card says ``replaces`` and shows ``diff`` against the live version."""

    chat_id: int
    turn_id: str
    text: str
    call: ToolCall | None = None
    proposal: ProposeTool | None = None
    description: str = ""
    gate_summary: str = ""
    replaces: str = ""
    diff: str = ""
    failed: bool = False
    output: str = ""


@dataclass(frozen=True, slots=True)
class AnswerCommand:
    """Answer owner command ``/name arg`` (``owner_commands.answer_command``)."""

    chat_id: int
    name: str
    arg: str


@dataclass(frozen=True, slots=True)
class SettleTap:
    """Answer a tap with ``outcome`` on its card (the keyboard goes); a ``final`` outcome is
    the card's last word, a queued one is replaced once the tap is applied."""

    decision: Decision
    outcome: str
    final: bool = True


@dataclass(frozen=True, slots=True)
class ExpireCard:
    """A parked approval (or promotion) expired untapped: its card gains ``outcome`` and
    loses its keyboard, and the owner is told ``notice`` in a message of its own."""

    chat_id: int
    turn_id: str
    outcome: str
    notice: str


@dataclass(frozen=True, slots=True)
class RoutePromotion:
    """Hand a tap on a promotion to the gate runner."""

    decision: Decision


@dataclass(frozen=True, slots=True)
class TakeParked:
    """Consume the parked call this tap decides (exactly once), judging its
    expiry at ``tapped_at`` (when a queued tap was accepted; 0: now)."""

    decision: Decision
    tapped_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Resume:
    """Resume a parked turn with the owner's decision."""

    request: ResumeRequest


@dataclass(frozen=True, slots=True)
class TakeRepair:
    """Take the repair offer a "Try to fix" tap decides, for turn ``turn_id``, and hand it to
    ``Arbiter.on_repair_taken`` with today's budget spent."""

    decision: Decision
    turn_id: str


@dataclass(frozen=True, slots=True)
class DropRepair:
    """Take (and audit) the repair offer a "Drop" tap decides, and settle the tap."""

    decision: Decision


@dataclass(frozen=True, slots=True)
class SpendBudget:
    """Spend one turn of ``day``'s budget (a repair turn)."""

    day: str


@dataclass(frozen=True, slots=True)
class BeginTurn:
    """Start a fresh turn on ``text`` (``source`` "owner", "schedule" or "repair") and record
    ``record`` in the conversation (the text itself when empty); ``photo`` is the owner's
    image, by key (the text holds its placeholder)."""

    turn_id: str
    chat_id: int
    text: str
    source: str
    record: str = ""
    photo: Photo | None = None


@dataclass(frozen=True, slots=True)
class FinishInbox:
    """The turn's inbox event is answered."""

    turn_id: str


@dataclass(frozen=True, slots=True)
class RecordReply:
    """Append the turn's reply to the conversation."""

    chat_id: int
    text: str


@dataclass(frozen=True, slots=True)
class ApplyOp:
    """Carry out one op of a finished turn (park, gate, remember, schedule); a park here has
    passed ``Arbiter.on_park``."""

    turn_id: str
    chat_id: int
    op: Op


@dataclass(frozen=True, slots=True)
class RefusePark:
    """Audit that ``call`` of turn ``turn_id`` was not parked, and ``why``."""

    turn_id: str
    call: ToolCall
    why: str


@dataclass(frozen=True, slots=True)
class Strike:
    """Debit strikes for the self-coded tools that failed in a turn."""

    chat_id: int
    failures: tuple[ToolFailure, ...]


@dataclass(frozen=True, slots=True)
class NowIdle:
    """No turn runs for ``chat_id`` now (the console's cue to go on)."""

    chat_id: int


@dataclass(frozen=True, slots=True)
class StartDue:
    """Mark scheduled turn ``schedule_id`` started and spend one turn of ``day``'s budget."""

    schedule_id: int
    day: str


@dataclass(frozen=True, slots=True)
class RefuseDue:
    """Mark scheduled turn ``schedule_id`` started, never to run, and audit why: the day's
    budget is spent."""

    schedule_id: int
    prompt: str


@dataclass(frozen=True, slots=True)
class ExpireParked:
    """Expire (and audit) the parked approvals and promotions whose time is up at ``now``,
    except the approvals in ``keep`` (a tap on them is queued); each is handed to
    ``expired_cards``."""

    now: float
    keep: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Abandon:
    """Close inbox rows that will never be answered."""

    item_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Reoffer:
    """Put events whose turn a crash cut short back in the inbox."""


@dataclass(frozen=True, slots=True)
class Pump:
    """Read the inbox afresh and hand it to ``Arbiter.on_inbox`` (with ``idle_chat``)."""

    idle_chat: int | None = None


@dataclass(frozen=True, slots=True)
class ArmTick:
    """Look at the clock again after ``tick_delay`` of the next due scheduled turn."""


Effect = (
    TakeRow
    | Say
    | AnswerCommand
    | SettleTap
    | ExpireCard
    | RoutePromotion
    | TakeRepair
    | DropRepair
    | SpendBudget
    | TakeParked
    | Resume
    | BeginTurn
    | FinishInbox
    | RecordReply
    | ApplyOp
    | RefusePark
    | Strike
    | NowIdle
    | StartDue
    | RefuseDue
    | ExpireParked
    | Abandon
    | Reoffer
    | Pump
    | ArmTick
)
