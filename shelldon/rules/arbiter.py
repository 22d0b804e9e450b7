"""The arbiter's rules, as a plain object: each event in, the effects to carry out back.

``Arbiter`` remembers what the ArbiterActor must between messages (the turn in flight, who the
owners are, the day the owner was told the schedule budget is spent) and answers each event —
the inbox as it stands (``InboxView``), a turn that ended, an approval taken, a tick — with a
list of effects, frozen values the actor carries out in order (send a message, take or write a
sqlite row). It reads and writes nothing itself, so every rule is tested without an actor, a
database or a clock. The rules:

- Only the owner acts: an inbox event from anyone else is taken and dropped, logged.
- Approval taps and owner commands are not chat: they are handled at once, never behind a turn.
- One turn at a time. Chat waits in the inbox, oldest first; past ``max_queue`` the newest are
  answered "busy" and dropped. A tap on a parked RISKY call needs the slot (its turn resumes),
  so while a turn runs it is accepted and queued: its inbox row stays untaken (durable, and
  read again after a restart) until the slot frees, and its approval does not expire meanwhile.
- Text shaped like a command (``/word``) is never chat: an unknown one is answered locally.
- A scheduled turn starts only when no turn runs and within the daily budget; the owner is told
  of a refusal once a day.
- "Try to fix" on a failed gate's card is a turn like a scheduled one: it needs the slot and
  the daily budget, spends one turn of it, and only the owner's tap on a parked offer (taken
  exactly once) starts it; the offer's round, from the store, caps how often.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

import structlog

from shelldon.config import LimitsSettings
from shelldon.contracts import (
    ContractError,
    Decision,
    InboundMessage,
    Op,
    RequestToolApproval,
    Result,
    ResumeRequest,
    ToolFailure,
    decode,
)
from shelldon.rules.repair import repair_prompt, repair_record
from shelldon.rules.replies import approval_question, expired_notice
from shelldon.rules.risky import describe_call, park_refusal, refused_park_text
from shelldon.rules.turn_reply import turn_reply
from shelldon.rules.turnwatch import apology
from shelldon.store import Pending, RepairOffer, Scheduled

log = structlog.get_logger(__name__)

OWNER_COMMANDS: tuple[tuple[str, str], ...] = (
    ("start", "Say hello and see what I can do"),
    ("help", "How to talk to me, and what needs your tap"),
    ("tools", "My tools: live, waiting for you, quarantined, with strikes"),
    ("pending", "Approvals and promotions waiting for your tap, with their age"),
    ("budget", "Today's budget for turns I start myself"),
    ("restore", "Bring a quarantined tool back: /restore NAME"),
    ("memory", "What I remember, numbered"),
    ("forget", "Forget one thing I remember: /forget N"),
    ("new", "Start a fresh conversation (what I remember stays)"),
    ("schedule", "Turns I have scheduled for later, numbered"),
    ("cancel", "Cancel a scheduled turn: /cancel N"),
    ("usage", "Model calls and tokens today and this month, and their cost"),
    ("retire", "Take a tool out of my toolbox for good: /retire NAME"),
)
"""Owner commands, answered without a turn, with the line Telegram's menu (setMyCommands) and
/help show for each: the one table of them."""

COMMANDS = tuple(name for name, _ in OWNER_COMMANDS)

CONSOLE_CHAT = 0
CONSOLE_USER = 0
"""The console's one chat and its one person (``shelldon chat`` and ``shelldon demo``)."""

BUSY_REPLY = (
    "I'm still busy with your earlier messages, so I dropped this one — send it again in a bit."
)
EXPIRED = "⌛ Expired — nothing ran."
EXPIRED_PROMOTION = "⌛ Expired — not added."
EXPIRED_REPAIR = "⌛ Expired — no fix was tried."
EXPIRED_BY_KIND = {"promotion": EXPIRED_PROMOTION, "repair": EXPIRED_REPAIR}
"""What an expired card says, by the kind of what was parked (an approval: ``EXPIRED``)."""
GONE = "This approval was already decided or has expired; your tap changed nothing."
APPROVED = "✅ Approved — running it now."
DENIED = "❌ Denied — I won't run it."
QUEUED_APPROVED = "✅ Approved — I'll run it as soon as I finish what I'm doing."
QUEUED_DENIED = "❌ Denied — it won't run; I'll carry on once I finish what I'm doing."
QUEUED_REPAIR = "🔧 I'll try to fix it as soon as I finish what I'm doing."
UNREADABLE = "⚠ That approval could not be read back, so nothing ran. Ask me again."
LOST = "⚠ Another turn started before your tap was applied, so nothing ran. Ask me again."
BUDGET_SPENT = (
    "I skipped a scheduled task: today's budget for turns I start myself is spent. "
    "/budget shows it."
)
REPAIR_BUDGET_SPENT = (
    "Today's budget for turns I start myself is spent, so I can't try to fix it now; "
    "tap again tomorrow (/budget shows it)."
)
REPAIR_BUSY = "I was busy with another turn, so I did not start the fix; ask me to fix it."
REPAIR_CAPPED = "That tool had its repair rounds already, so I won't try again."
TICK_S = 30.0
"""The longest the arbiter sleeps between looks at the clock (expiries, adopted turns)."""

ADOPTED_SLACK_S = 5.0
"""How long past its ceilings a turn adopted after a restart may run before it counts as lost."""


# ---------------------------------------------------------------- the rules as functions


def owners_of(allowed_users: Iterable[int], *, console: bool) -> frozenset[int]:
    """Who may talk to the pet: ``allowed_users``, and at the console the person at it."""
    return frozenset(allowed_users) | ({CONSOLE_USER} if console else frozenset())


_COMMAND = re.compile(r"/([A-Za-z0-9_]{1,32})(?:@[A-Za-z0-9_]{1,64})?(?:\s+(.*))?", re.DOTALL)


def command_of(text: str) -> tuple[str, str] | None:
    """``("restore", "weather")`` for "/restore weather" (also "/restore@my_bot weather");
    None for text that is not shaped like a command ("/tmp/x is full" is chat). The name may
    be no owner command ("/rm -rf"): such text is answered locally, never sent to the model."""
    match = _COMMAND.fullmatch(text.strip())
    if match is None:
        return None
    return match.group(1).lower(), (match.group(2) or "").strip()


def is_chat(event: InboundMessage | Decision) -> bool:
    """Whether ``event`` waits for the turn slot and is answered by a turn (not a tap or an
    owner command, which are answered at once)."""
    return isinstance(event, InboundMessage) and command_of(event.text) is None


def new_turn_id(prefix: str = "t") -> str:
    """A short unique turn id (fits Telegram's 64-byte callback data with room to spare)."""
    return f"{prefix}{uuid.uuid4().hex[:16]}"


def budget_day(now: float) -> str:
    """The budget's day key (UTC date) for epoch seconds ``now``."""
    return dt.datetime.fromtimestamp(now, dt.UTC).date().isoformat()


def tick_delay(next_due: float | None, now: float) -> float:
    """Seconds until the arbiter should look at the clock again."""
    return TICK_S if next_due is None else min(TICK_S, max(0.05, next_due - now))


@dataclass(frozen=True, slots=True)
class Entry:
    """One decoded inbox row."""

    item_id: int
    event: InboundMessage | Decision


@dataclass(slots=True)
class InboxPlan:
    """What to do with the inbox: handle ``now`` at once, maybe ``start`` a turn, answer ``busy``
    ones, drop ``bad`` rows (undecodable, not inbox events, or not from an owner)."""

    now: list[Entry] = field(default_factory=list)
    start: Entry | None = None
    busy: list[Entry] = field(default_factory=list)
    bad: list[tuple[int, str]] = field(default_factory=list)


def plan_inbox(
    rows: Iterable[tuple[int, bytes]], *, busy: bool, max_queue: int, owners: frozenset[int]
) -> InboxPlan:
    """Sort the inbox rows (oldest first) into immediate work, a turn to start, and overflow."""
    plan = InboxPlan()
    chat: list[Entry] = []
    for item_id, blob in rows:
        try:
            event = decode(blob)
        except ContractError as exc:
            plan.bad.append((item_id, str(exc)))
            continue
        if not isinstance(event, InboundMessage | Decision):
            plan.bad.append((item_id, f"{type(event).__name__} does not belong in the inbox"))
            continue
        if event.user_id not in owners:
            plan.bad.append(
                (item_id, f"{type(event).__name__} from user {event.user_id}, no owner")
            )
            continue
        entry = Entry(item_id, event)
        if is_chat(event):
            chat.append(entry)
        else:
            plan.now.append(entry)
    if not busy and chat:
        plan.start = chat.pop(0)
    if len(chat) > max_queue:
        plan.busy = chat[max_queue:]
    return plan


def left_behind(rows: Iterable[tuple[int, bytes]], chat_id: int) -> list[tuple[int, str]]:
    """Events of ``chat_id`` that an earlier session left unanswered, ``(item_id, what)``.

    A console session that ended mid-turn (Ctrl-C, a crash) leaves its typed lines here; the
    owner has left that conversation, so the next session must not answer them out of context
    (a Telegram chat is still there: its events are answered after a restart)."""
    found = []
    for item_id, blob in rows:
        try:
            event = decode(blob)
        except ContractError:
            continue  # plan_inbox drops it, logged
        if isinstance(event, InboundMessage) and event.chat_id == chat_id:
            found.append((item_id, event.text))
        elif isinstance(event, Decision) and event.chat_id == chat_id:
            found.append((item_id, "yes" if event.approved else "no"))
    return found


def left_behind_notice(gone: list[tuple[int, str]]) -> str:
    """What the console says about lines an earlier session left unanswered."""
    said = ", ".join(repr(text[:60]) for _, text in gone[:3])
    more = f" and {len(gone) - 3} more" if len(gone) > 3 else ""
    return (
        f"(An earlier session ended before I answered {said}{more}; I won't answer "
        "that out of context now. Ask again if you still want it.)"
    )


# ---------------------------------------------------------------- events in


@dataclass(frozen=True, slots=True)
class InboxView:
    """The inbox and what it is decided against, read at one moment: untaken rows oldest
    first, the turn ids parked for a tap, the scheduled turns due, today's budget spent."""

    rows: tuple[tuple[int, bytes], ...]
    now: float
    approvals: frozenset[str] = frozenset()
    promotions: frozenset[str] = frozenset()
    repairs: frozenset[str] = frozenset()
    due: tuple[Scheduled, ...] = ()
    spent_today: int = 0


# ---------------------------------------------------------------- effects out


@dataclass(frozen=True, slots=True)
class TakeRow:
    """Mark inbox row ``item_id`` taken (durably by ``turn_id`` when it starts a turn)."""

    item_id: int
    turn_id: str = ""


@dataclass(frozen=True, slots=True)
class Say:
    """Send ``text`` to the owner; its first ``markdown_chars`` characters are the model's
    Markdown (rendered by a transport that can), the rest is sent as written."""

    chat_id: int
    text: str
    markdown_chars: int = 0


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
    """Ask the approval store to consume the parked call this tap decides, judging its
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
    ``record`` in the conversation (the text itself when empty)."""

    turn_id: str
    chat_id: int
    text: str
    source: str
    record: str = ""


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
    """Carry out one op of a finished turn (park, gate, remember, schedule)."""

    turn_id: str
    chat_id: int
    op: Op


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


# ---------------------------------------------------------------- the arbiter


class Arbiter:
    """One turn at a time, the schedule within the daily budget, taps routed; see the module."""

    def __init__(self, limits: LimitsSettings, owners: frozenset[int]) -> None:
        self.limits = limits
        self.owners = owners
        self.busy: str | None = None  # the turn in flight
        self.busy_chat = 0
        self.adopted_until = 0.0  # a turn adopted after a restart counts as lost past this
        self.told_budget_day = ""
        # Taps on parked approvals waiting in the inbox for the slot, told "queued" already:
        # inbox row id -> (turn id, when accepted). Memory only: after a restart they are
        # applied at once if the slot is free, else told again, once.
        self.queued: dict[int, tuple[str, float]] = {}

    def on_start(
        self,
        *,
        fresh: bool,
        console: bool,
        unanswered: Iterable[tuple[int, bytes]],
        unfinished: list[tuple[int, str, bytes]],
        now: float,
    ) -> list[Effect]:
        """The actor's first wiring. After a service start (``fresh``: a crash or power cut
        ended any turn in flight) unanswered messages go back in the inbox and are answered
        again, except the console's (its owner has left that conversation); after only the
        actor restarted, the turn actor is still running the last turn, so wait for it."""
        if fresh:
            effects: list[Effect] = []
            gone = left_behind(unanswered, CONSOLE_CHAT) if console else []
            if gone:
                log.warning("console_input_left_behind", messages=len(gone))
                effects.append(Abandon(tuple(item_id for item_id, _ in gone)))
                effects.append(Say(CONSOLE_CHAT, left_behind_notice(gone)))
            return [*effects, Reoffer()]
        if unfinished:
            _item, turn_id, blob = unfinished[-1]
            try:
                event = decode(blob)
            except ContractError:
                event = None
            self.busy = turn_id
            self.busy_chat = event.chat_id if isinstance(event, InboundMessage) else 0
            lim = self.limits
            self.adopted_until = now + lim.turn_timeout_s + lim.kill_grace_s + ADOPTED_SLACK_S
            log.warning("turn_in_flight_adopted", turn_id=turn_id)
        return []

    def on_inbox(self, view: InboxView, idle_chat: int | None = None) -> list[Effect]:
        """Take what the inbox holds: taps and commands now, a turn if the slot is free, "busy"
        past the queue bound, then a due scheduled turn; ``idle_chat`` is told if no turn runs
        afterwards."""
        plan = plan_inbox(
            view.rows,
            busy=self.busy is not None,
            max_queue=self.limits.max_queue,
            owners=self.owners,
        )
        effects: list[Effect] = []
        for item_id, why in plan.bad:
            log.warning("inbox_item_dropped", item_id=item_id, error=why)
            effects.append(TakeRow(item_id))
        waiting = {item_id for item_id, _ in view.rows}
        self.queued = {k: v for k, v in self.queued.items() if k in waiting}
        for entry in plan.now:
            if isinstance(entry.event, Decision):
                effects.extend(self._tapped(entry.item_id, entry.event, view))
            else:
                parsed = command_of(entry.event.text)
                assert parsed is not None  # plan_inbox put no chat here
                effects.append(TakeRow(entry.item_id))
                effects.append(AnswerCommand(entry.event.chat_id, *parsed))
        for entry in plan.busy:
            effects += [TakeRow(entry.item_id), Say(entry.event.chat_id, BUSY_REPLY)]
        if self.busy is None and plan.start is not None:
            start, turn_id = plan.start.event, new_turn_id("t")
            assert isinstance(start, InboundMessage)  # plan_inbox starts only chat
            effects.append(TakeRow(plan.start.item_id, turn_id))
            effects.append(self._begin(turn_id, start.chat_id, start.text, "owner"))
        if self.busy is None:
            effects.extend(self._scheduled(view))
        if idle_chat is not None and self.busy is None:
            effects.append(NowIdle(idle_chat))
        return effects

    def _tapped(self, item_id: int, decision: Decision, view: InboxView) -> list[Effect]:
        """A tap: a promotion's goes to the gate, a parked call's resumes its turn (queued,
        its row left in the inbox, while another turn holds the slot), any other is stale."""
        if decision.approved is None:
            log.warning("malformed_decision_denied", turn_id=decision.turn_id)
            decision = dataclasses.replace(decision, approved=False)
        if decision.turn_id in view.promotions:
            return [TakeRow(item_id), RoutePromotion(decision)]
        if decision.turn_id in view.repairs:
            if decision.approved and self.busy is not None:
                return self._queue(item_id, decision, view, QUEUED_REPAIR)
            self.queued.pop(item_id, None)
            return [TakeRow(item_id), *self._repair_tapped(decision, view)]
        if decision.turn_id in view.approvals and self.busy != decision.turn_id:
            if self.busy is None:
                _, tapped_at = self.queued.pop(item_id, ("", 0.0))
                self.busy, self.busy_chat = decision.turn_id, decision.chat_id
                return [TakeRow(item_id), TakeParked(decision, tapped_at)]
            queued = QUEUED_APPROVED if decision.approved else QUEUED_DENIED
            return self._queue(item_id, decision, view, queued)
        self.queued.pop(item_id, None)
        log.info("decision_for_nothing", turn_id=decision.turn_id)
        return [TakeRow(item_id), SettleTap(decision, GONE)]

    def _queue(
        self, item_id: int, decision: Decision, view: InboxView, outcome: str
    ) -> list[Effect]:
        """Keep a tap that needs the slot while another turn holds it: its inbox row stays
        untaken (durable; read again when the slot frees) and its card says it is accepted."""
        if item_id in self.queued:
            return []
        told = decision.turn_id in self._queued_turns()
        self.queued[item_id] = (decision.turn_id, view.now)
        if told:
            return []  # a second tap on one card: the first stands, this one waits too
        log.info("tap_queued", turn_id=decision.turn_id, busy=self.busy)
        return [SettleTap(decision, outcome, final=False)]

    def _repair_tapped(self, decision: Decision, view: InboxView) -> list[Effect]:
        if not decision.approved:
            return [DropRepair(decision)]
        if self.busy is not None:  # never for a tap taken from the inbox: it was queued
            return [Say(decision.chat_id, REPAIR_BUSY)]
        # The card keeps its buttons: the owner may tap again tomorrow, or drop it.
        if view.spent_today >= self.limits.daily_turn_budget:
            log.warning("repair_refused_budget", offer=decision.turn_id)
            return [Say(decision.chat_id, REPAIR_BUDGET_SPENT)]
        # The slot is held for the offer until the store says whether it is still there.
        self.busy, self.busy_chat = decision.turn_id, decision.chat_id
        return [TakeRepair(decision, new_turn_id("r"))]

    def on_repair_taken(
        self,
        decision: Decision,
        turn_id: str,
        offer: RepairOffer | None,
        spent_today: int,
        now: float,
    ) -> list[Effect]:
        """The store consumed the repair offer a "Try to fix" tap decided (``offer``), or found
        it gone (None: expired, taken already): start the repair turn, or say why not."""
        if self.busy == decision.turn_id:
            self.busy = None
        if offer is None:
            return [SettleTap(decision, EXPIRED), Pump()]
        if offer.round >= self.limits.max_repair_rounds:
            log.warning("repair_refused_capped", tool=offer.name, round=offer.round)
            return [SettleTap(decision, REPAIR_CAPPED), Pump()]
        if self.busy is not None:
            # Another turn took the slot meanwhile (the turn actor restarted): one at a time.
            return [SettleTap(decision, REPAIR_BUSY), Pump()]
        if spent_today >= self.limits.daily_turn_budget:
            return [SettleTap(decision, REPAIR_BUDGET_SPENT), Pump()]
        log.info("repair_started", tool=offer.name, round=offer.round + 1, turn_id=turn_id)
        text = repair_prompt(offer, self.limits)
        return [
            SettleTap(decision, f"🔧 Trying to fix {offer.name} (round {offer.round + 1})."),
            SpendBudget(budget_day(now)),
            self._begin(turn_id, offer.chat_id, text, "repair", repair_record(offer, self.limits)),
        ]

    def _begin(
        self, turn_id: str, chat_id: int, text: str, source: str, record: str = ""
    ) -> BeginTurn:
        self.busy, self.busy_chat = turn_id, chat_id
        return BeginTurn(turn_id, chat_id, text, source, record)

    def _scheduled(self, view: InboxView) -> list[Effect]:
        effects: list[Effect] = []
        day, spent = budget_day(view.now), view.spent_today
        for due in view.due:
            if spent < self.limits.daily_turn_budget:
                effects.append(StartDue(due.id, day))
                effects.append(self._begin(new_turn_id("s"), due.chat_id, due.prompt, "schedule"))
                return effects
            log.warning("scheduled_turn_refused_budget", prompt=due.prompt[:80], day=day)
            effects.append(RefuseDue(due.id, due.prompt[:200]))
            if self.told_budget_day != day:
                self.told_budget_day = day
                effects.append(Say(due.chat_id, BUDGET_SPENT))
        return effects

    def on_turn_ended(self, chat_id: int, result: Result) -> list[Effect]:
        """A turn is over: its reply, its ops and its strikes go out, and the slot is free."""
        if result.turn_id != self.busy:
            log.warning("stray_turn_ended", turn_id=result.turn_id, busy=self.busy)
            return []
        self.busy, self.adopted_until = None, 0.0
        effects: list[Effect] = [FinishInbox(result.turn_id)]
        ops, refusals, asked = [], [], []
        for op in result.ops:
            why = park_refusal(op.call) if isinstance(op, RequestToolApproval) else ""
            if isinstance(op, RequestToolApproval) and why:
                # Only a RISKY built-in's call is ever parked: nothing waits for a tap.
                log.warning("park_refused", turn_id=result.turn_id, tool=op.call.name, why=why)
                refusals.append(Say(chat_id, refused_park_text(op.call, why)))
            else:
                ops.append(op)
                if isinstance(op, RequestToolApproval):
                    asked.append(approval_question(describe_call(op.call)))
        # The owner reads a parked call's question once, on its card; the conversation keeps it
        # in the parent's own words, so the model knows next turn what it asked.
        said = turn_reply(result.reply, ops)
        if said.text:
            effects.append(Say(chat_id, said.text, said.markdown_chars))
        recorded = "\n\n".join(filter(None, [result.reply, *asked]))
        if recorded:
            effects.append(RecordReply(chat_id, recorded))
        effects += refusals
        effects += [ApplyOp(result.turn_id, chat_id, op) for op in ops]
        if result.tool_failures:
            effects.append(Strike(chat_id, result.tool_failures))
        # The conversation turn is complete, unless it parked (it goes on after the tap).
        return [*effects, Pump(idle_chat=None if asked else chat_id)]

    def on_turn_lost(self) -> list[Effect]:
        """The turn actor died with the turn in flight: the owner gets an apology."""
        if self.busy is None:
            return []
        log.warning("turn_lost_with_turn_actor", turn_id=self.busy)
        return self.on_turn_ended(self.busy_chat, apology(self.busy, "crash"))

    def on_approval_taken(
        self, decision: Decision, parked: RequestToolApproval | None, status: str = "ok"
    ) -> list[Effect]:
        """The approval store consumed the parked call a tap decided (``parked``), or found
        it gone (None; ``status`` says why: "expired", "unknown" (decided already), "corrupt")."""
        mine = self.busy == decision.turn_id
        if parked is not None and (mine or self.busy is None):
            approved = bool(decision.approved)
            self.busy, self.busy_chat = decision.turn_id, decision.chat_id
            log.info("turn_resumed", turn_id=decision.turn_id, approved=approved)
            request = ResumeRequest(decision.turn_id, decision.chat_id, parked, approved)
            return [SettleTap(decision, APPROVED if approved else DENIED), Resume(request)]
        if parked is not None:
            # Another turn took the slot meanwhile (the turn actor restarted): one turn at a
            # time holds, and the consumed call does not run.
            log.warning("approval_taken_while_busy", turn_id=decision.turn_id, busy=self.busy)
            outcome = LOST
        else:
            outcome = {"expired": EXPIRED, "corrupt": UNREADABLE}.get(status, GONE)
        if mine:
            self.busy = None
        return [SettleTap(decision, outcome), Pump()]

    def on_tick(self, now: float) -> list[Effect]:
        """The clock moved: a turn adopted after a restart that never ended is given up on,
        parked rows past their time expire, the inbox is read, the next tick is armed."""
        effects: list[Effect] = []
        if self.busy is not None and self.adopted_until and now > self.adopted_until:
            log.warning("adopted_turn_never_ended", turn_id=self.busy)
            effects += self.on_turn_ended(self.busy_chat, apology(self.busy, "crash"))
        return [*effects, *self.on_expiry_due(now), Pump(), ArmTick()]

    def on_expiry_due(self, now: float) -> list[Effect]:
        """A parked approval's time may be up: expire what is due, except approvals whose tap
        is queued (accepted, so they must not expire while they wait for the slot)."""
        return [ExpireParked(now, self._queued_turns())]

    def _queued_turns(self) -> frozenset[str]:
        return frozenset(turn_id for turn_id, _ in self.queued.values())


def expired_cards(gone: Iterable[Pending], now: float) -> list[Effect]:
    """What the owner is told of parked rows that just expired: one notice per card."""
    return [
        ExpireCard(
            p.chat_id,
            p.turn_id,
            EXPIRED_BY_KIND.get(p.kind, EXPIRED),
            expired_notice(p.kind, p.summary, now - p.created_at),
        )
        for p in gone
    ]


def inbox_view(
    rows: Iterable[tuple[int, bytes]],
    parked: Iterable[tuple[str, str]],
    due: Iterable[Scheduled],
    spent_today: int,
    now: float,
) -> InboxView:
    """An ``InboxView`` from the store's rows: ``parked`` as ``(kind, turn_id)`` pairs."""
    pairs = list(parked)
    return InboxView(
        rows=tuple(rows),
        now=now,
        approvals=frozenset(t for kind, t in pairs if kind == "approval"),
        promotions=frozenset(t for kind, t in pairs if kind == "promotion"),
        repairs=frozenset(t for kind, t in pairs if kind == "repair"),
        due=tuple(due),
        spent_today=spent_today,
    )
