"""The arbiter's rules, as a plain object: an event in (the inbox as it stands, a turn that
ended, an approval taken, a tick), a list of effects (``rules.effects``) out, which the
ArbiterActor carries out in order. It reads and writes nothing itself, so every rule is tested
without an actor, a database or a clock. The rules:

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
import uuid
from collections.abc import Iterable

import structlog

from shelldon.config import LimitsSettings
from shelldon.contracts import (
    ContractError,
    Decision,
    InboundMessage,
    Op,
    Photo,
    RequestToolApproval,
    Result,
    ResumeRequest,
    decode,
)
from shelldon.replies import describe_call
from shelldon.rules import effects as fx
from shelldon.rules import replies as texts
from shelldon.rules.commands import CONSOLE_CHAT, command_of
from shelldon.rules.inbox_plan import InboxView, left_behind, left_behind_notice, plan_inbox
from shelldon.rules.repair import repair_prompt, repair_record
from shelldon.rules.risky import park_refusal, refused_park_text
from shelldon.rules.turn_reply import turn_reply
from shelldon.rules.turnwatch import apology
from shelldon.store.rows import Pending, RepairOffer

log = structlog.get_logger(__name__)

TICK_S = 30.0
"""The longest the arbiter sleeps between looks at the clock (expiries, adopted turns)."""

ADOPTED_SLACK_S = 5.0
"""How long past its ceilings a turn adopted after a restart may run before it counts as lost."""


def new_turn_id(prefix: str = "t") -> str:
    """A short unique turn id (fits Telegram's 64-byte callback data with room to spare)."""
    return f"{prefix}{uuid.uuid4().hex[:16]}"


def budget_day(now: float) -> str:
    """The budget's day key (UTC date) for epoch seconds ``now``."""
    return dt.datetime.fromtimestamp(now, dt.UTC).date().isoformat()


def tick_delay(next_due: float | None, now: float) -> float:
    """Seconds until the arbiter should look at the clock again."""
    return TICK_S if next_due is None else min(TICK_S, max(0.05, next_due - now))


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
    ) -> list[fx.Effect]:
        """The actor's first wiring. After a service start (``fresh``: a crash or power cut
        ended any turn in flight) unanswered messages go back in the inbox and are answered
        again, except the console's (its owner has left that conversation); after only the
        actor restarted, the turn actor is still running the last turn, so wait for it."""
        if fresh:
            effects: list[fx.Effect] = []
            gone = left_behind(unanswered, CONSOLE_CHAT) if console else []
            if gone:
                log.warning("console_input_left_behind", messages=len(gone))
                effects.append(fx.Abandon(tuple(item_id for item_id, _ in gone)))
                effects.append(fx.Say(CONSOLE_CHAT, left_behind_notice(gone)))
            return [*effects, fx.Reoffer()]
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

    def on_inbox(self, view: InboxView, idle_chat: int | None = None) -> list[fx.Effect]:
        """Take what the inbox holds: taps and commands now, a turn if the slot is free, "busy"
        past the queue bound, then a due scheduled turn; ``idle_chat`` is told if no turn runs
        afterwards."""
        plan = plan_inbox(
            view.rows,
            busy=self.busy is not None,
            max_queue=self.limits.max_queue,
            owners=self.owners,
        )
        effects: list[fx.Effect] = []
        for item_id, why in plan.bad:
            log.warning("inbox_item_dropped", item_id=item_id, error=why)
            effects.append(fx.TakeRow(item_id))
        waiting = {item_id for item_id, _ in view.rows}
        self.queued = {k: v for k, v in self.queued.items() if k in waiting}
        for entry in plan.now:
            if isinstance(entry.event, Decision):
                effects.extend(self._tapped(entry.item_id, entry.event, view))
            else:
                parsed = command_of(entry.event.text)
                assert parsed is not None  # plan_inbox put no chat here
                effects.append(fx.TakeRow(entry.item_id))
                effects.append(fx.AnswerCommand(entry.event.chat_id, *parsed))
        for entry in plan.busy:
            effects += [fx.TakeRow(entry.item_id), fx.Say(entry.event.chat_id, texts.BUSY_REPLY)]
        if self.busy is None and plan.start is not None:
            start, turn_id = plan.start.event, new_turn_id("t")
            assert isinstance(start, InboundMessage)  # plan_inbox starts only chat
            effects.append(fx.TakeRow(plan.start.item_id, turn_id))
            effects.append(
                self._begin(turn_id, start.chat_id, start.text, "owner", photo=start.photo)
            )
        if self.busy is None:
            effects.extend(self._scheduled(view))
        if idle_chat is not None and self.busy is None:
            effects.append(fx.NowIdle(idle_chat))
        return effects

    def _tapped(self, item_id: int, decision: Decision, view: InboxView) -> list[fx.Effect]:
        """A tap: a promotion's goes to the gate, a parked call's resumes its turn (queued,
        its row left in the inbox, while another turn holds the slot), any other is stale."""
        if decision.approved is None:
            log.warning("malformed_decision_denied", turn_id=decision.turn_id)
            decision = dataclasses.replace(decision, approved=False)
        if decision.turn_id in view.promotions:
            return [fx.TakeRow(item_id), fx.RoutePromotion(decision)]
        if decision.turn_id in view.repairs:
            if decision.approved and self.busy is not None:
                return self._queue(item_id, decision, view, texts.QUEUED_REPAIR)
            self.queued.pop(item_id, None)
            return [fx.TakeRow(item_id), *self._repair_tapped(decision, view)]
        if decision.turn_id in view.approvals and self.busy != decision.turn_id:
            if self.busy is None:
                _, tapped_at = self.queued.pop(item_id, ("", 0.0))
                self.busy, self.busy_chat = decision.turn_id, decision.chat_id
                return [fx.TakeRow(item_id), fx.TakeParked(decision, tapped_at)]
            queued = texts.QUEUED_APPROVED if decision.approved else texts.QUEUED_DENIED
            return self._queue(item_id, decision, view, queued)
        self.queued.pop(item_id, None)
        log.info("decision_for_nothing", turn_id=decision.turn_id)
        return [fx.TakeRow(item_id), fx.SettleTap(decision, texts.GONE)]

    def _queue(
        self, item_id: int, decision: Decision, view: InboxView, outcome: str
    ) -> list[fx.Effect]:
        """Keep a tap that needs the slot while another turn holds it: its inbox row stays
        untaken (durable; read again when the slot frees) and its card says it is accepted."""
        if item_id in self.queued:
            return []
        told = decision.turn_id in self._queued_turns()
        self.queued[item_id] = (decision.turn_id, view.now)
        if told:
            return []  # a second tap on one card: the first stands, this one waits too
        log.info("tap_queued", turn_id=decision.turn_id, busy=self.busy)
        return [fx.SettleTap(decision, outcome, final=False)]

    def _repair_tapped(self, decision: Decision, view: InboxView) -> list[fx.Effect]:
        if not decision.approved:
            return [fx.DropRepair(decision)]
        if self.busy is not None:  # never for a tap taken from the inbox: it was queued
            return [fx.Say(decision.chat_id, texts.REPAIR_BUSY)]
        # The card keeps its buttons: the owner may tap again tomorrow, or drop it.
        if view.spent_today >= self.limits.daily_turn_budget:
            log.warning("repair_refused_budget", offer=decision.turn_id)
            return [fx.Say(decision.chat_id, texts.REPAIR_BUDGET_SPENT)]
        # The slot is held for the offer until the store says whether it is still there.
        self.busy, self.busy_chat = decision.turn_id, decision.chat_id
        return [fx.TakeRepair(decision, new_turn_id("r"))]

    def on_repair_taken(
        self,
        decision: Decision,
        turn_id: str,
        offer: RepairOffer | None,
        spent_today: int,
        now: float,
    ) -> list[fx.Effect]:
        """The store consumed the repair offer a "Try to fix" tap decided (``offer``), or found
        it gone (None: expired, taken already): start the repair turn, or say why not."""
        if self.busy == decision.turn_id:
            self.busy = None
        if offer is None:
            return [fx.SettleTap(decision, texts.EXPIRED), fx.Pump()]
        if offer.round >= self.limits.max_repair_rounds:
            log.warning("repair_refused_capped", tool=offer.name, round=offer.round)
            return [fx.SettleTap(decision, texts.REPAIR_CAPPED), fx.Pump()]
        if self.busy is not None:
            # Another turn took the slot meanwhile (the turn actor restarted): one at a time.
            return [fx.SettleTap(decision, texts.REPAIR_BUSY), fx.Pump()]
        if spent_today >= self.limits.daily_turn_budget:
            return [fx.SettleTap(decision, texts.REPAIR_BUDGET_SPENT), fx.Pump()]
        log.info("repair_started", tool=offer.name, round=offer.round + 1, turn_id=turn_id)
        text = repair_prompt(offer, self.limits)
        return [
            fx.SettleTap(decision, f"🔧 Trying to fix {offer.name} (round {offer.round + 1})."),
            fx.SpendBudget(budget_day(now)),
            self._begin(turn_id, offer.chat_id, text, "repair", repair_record(offer, self.limits)),
        ]

    def _begin(
        self,
        turn_id: str,
        chat_id: int,
        text: str,
        source: str,
        record: str = "",
        photo: Photo | None = None,
    ) -> fx.BeginTurn:
        self.busy, self.busy_chat = turn_id, chat_id
        return fx.BeginTurn(turn_id, chat_id, text, source, record, photo)

    def _scheduled(self, view: InboxView) -> list[fx.Effect]:
        effects: list[fx.Effect] = []
        day, spent = budget_day(view.now), view.spent_today
        for due in view.due:
            if spent < self.limits.daily_turn_budget:
                effects.append(fx.StartDue(due.id, day))
                effects.append(self._begin(new_turn_id("s"), due.chat_id, due.prompt, "schedule"))
                return effects
            log.warning("scheduled_turn_refused_budget", prompt=due.prompt[:80], day=day)
            effects.append(fx.RefuseDue(due.id, due.prompt[:200]))
            if self.told_budget_day != day:
                self.told_budget_day = day
                effects.append(fx.Say(due.chat_id, texts.BUDGET_SPENT))
        return effects

    def on_turn_ended(self, chat_id: int, result: Result, note: str = "") -> list[fx.Effect]:
        """A turn is over: its reply (with ``note``, the fallback's line, if it answered), its
        ops and its strikes go out, and the slot is free."""
        if result.turn_id != self.busy:
            log.warning("stray_turn_ended", turn_id=result.turn_id, busy=self.busy)
            return []
        self.busy, self.adopted_until = None, 0.0
        effects: list[fx.Effect] = [fx.FinishInbox(result.turn_id)]
        ops: list[Op] = []
        refusals: list[fx.Effect] = []
        asked: list[str] = []
        for op in result.ops:
            if isinstance(op, RequestToolApproval):
                parked = self.on_park(result.turn_id, chat_id, op)
                if not isinstance(parked[0], fx.ApplyOp):
                    refusals += parked
                    continue
                asked.append(texts.approval_question(describe_call(op.call)))
            ops.append(op)
        # The owner reads a parked call's question once, on its card; the conversation keeps it
        # in the parent's own words, so the model knows next turn what it asked.
        said = turn_reply(result.reply, ops, result.tool_failures, note)
        if said.text:
            effects.append(fx.Say(chat_id, said.text, said.markdown_chars))
        recorded = "\n\n".join(filter(None, [result.reply, *asked]))
        if recorded:
            effects.append(fx.RecordReply(chat_id, recorded))
        effects += refusals
        effects += [fx.ApplyOp(result.turn_id, chat_id, op) for op in ops]
        if result.tool_failures:
            effects.append(fx.Strike(chat_id, result.tool_failures))
        # The conversation turn is complete, unless it parked (it goes on after the tap).
        return [*effects, fx.Pump(idle_chat=None if asked else chat_id)]

    def on_park(self, turn_id: str, chat_id: int, op: RequestToolApproval) -> list[fx.Effect]:
        """A request to park a call for the owner's tap: only a RISKY built-in's call is ever
        parked (anything else would run code the owner never approved); any other is refused,
        audited and told, so nothing waits for a tap."""
        why = park_refusal(op.call)
        if not why:
            return [fx.ApplyOp(turn_id, chat_id, op)]
        log.warning("park_refused", turn_id=turn_id, tool=op.call.name, why=why)
        return [
            fx.RefusePark(turn_id, op.call, why),
            fx.Say(chat_id, refused_park_text(op.call, why)),
        ]

    def on_turn_lost(self) -> list[fx.Effect]:
        """The turn actor died with the turn in flight: the owner gets an apology."""
        if self.busy is None:
            return []
        log.warning("turn_lost_with_turn_actor", turn_id=self.busy)
        return self.on_turn_ended(self.busy_chat, apology(self.busy, "crash"))

    def on_approval_taken(
        self, decision: Decision, parked: RequestToolApproval | None, status: str = "ok"
    ) -> list[fx.Effect]:
        """The store gave back the parked call a tap decided (``parked``), or found
        it gone (None; ``status`` says why: "expired", "unknown" (decided already), "corrupt")."""
        mine = self.busy == decision.turn_id
        if parked is not None and (mine or self.busy is None):
            approved = bool(decision.approved)
            self.busy, self.busy_chat = decision.turn_id, decision.chat_id
            log.info("turn_resumed", turn_id=decision.turn_id, approved=approved)
            request = ResumeRequest(decision.turn_id, decision.chat_id, parked, approved)
            return [
                fx.SettleTap(decision, texts.APPROVED if approved else texts.DENIED),
                fx.Resume(request),
            ]
        if parked is not None:
            # Another turn took the slot meanwhile (the turn actor restarted): one turn at a
            # time holds, and the consumed call does not run.
            log.warning("approval_taken_while_busy", turn_id=decision.turn_id, busy=self.busy)
            outcome = texts.LOST
        else:
            outcome = {"expired": texts.EXPIRED, "corrupt": texts.UNREADABLE}.get(
                status, texts.GONE
            )
        if mine:
            self.busy = None
        return [fx.SettleTap(decision, outcome), fx.Pump()]

    def on_tick(self, now: float) -> list[fx.Effect]:
        """The clock moved: a turn adopted after a restart that never ended is given up on,
        parked rows past their time expire, the inbox is read, the next tick is armed."""
        effects: list[fx.Effect] = []
        if self.busy is not None and self.adopted_until and now > self.adopted_until:
            log.warning("adopted_turn_never_ended", turn_id=self.busy)
            effects += self.on_turn_ended(self.busy_chat, apology(self.busy, "crash"))
        return [*effects, *self.on_expiry_due(now), fx.Pump(), fx.ArmTick()]

    def on_expiry_due(self, now: float) -> list[fx.Effect]:
        """A parked approval's time may be up: expire what is due, except approvals whose tap
        is queued (accepted, so they must not expire while they wait for the slot)."""
        return [fx.ExpireParked(now, self._queued_turns())]

    def _queued_turns(self) -> frozenset[str]:
        return frozenset(turn_id for turn_id, _ in self.queued.values())


def expired_cards(gone: Iterable[Pending], now: float) -> list[fx.Effect]:
    """What the owner is told of parked rows that just expired: one notice per card."""
    return [
        fx.ExpireCard(
            p.chat_id,
            p.turn_id,
            texts.EXPIRED_BY_KIND.get(p.kind, texts.EXPIRED),
            texts.expired_notice(p.kind, p.summary, now - p.created_at),
        )
        for p in gone
    ]
