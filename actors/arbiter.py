"""ArbiterActor: the shell around ``shelldon.rules.arbiter.Arbiter``. It turns its messages into
the arbiter's events (reading the inbox when asked to) and carries out the effects it gets
back: messages to the other actors, rows taken or written in sqlite."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Collection
from typing import Any

import structlog
from thespian.actors import ActorAddress, WakeupMessage

from actors.base import ContractActor
from actors.messages import (
    ApprovalTaken,
    CardExpired,
    DecidePromotion,
    GateTool,
    Idle,
    InboxChanged,
    ParkApproval,
    PeerRestarted,
    Reply,
    Settle,
    StartResume,
    StartTurn,
    StrikeTools,
    TakeApproval,
    TurnEnded,
    Wire,
)
from shelldon.config import Settings
from shelldon.contracts import (
    Message,
    Op,
    ProposeTool,
    Remember,
    RequestToolApproval,
    Role,
    Schedule,
    TurnRequest,
)
from shelldon.rules import arbiter as rules
from shelldon.rules.owner_commands import answer_command
from shelldon.store import Store
from shelldon.toolbox.toolbox import Toolbox
from shelldon.worker.prompt import recent_history

log = structlog.get_logger(__name__)

DUE_AT_ONCE = 50
"""Scheduled turns looked at per inbox read (the rest wait for the next one)."""


SENDS: dict[type, tuple[str, Callable[[Any], Any]]] = {
    rules.Say: ("transport", lambda e: Reply(e.chat_id, e.text, markdown_chars=e.markdown_chars)),
    rules.SettleTap: ("transport", lambda e: Settle(e.decision, e.outcome, e.final)),
    rules.ExpireCard: (
        "transport",
        lambda e: CardExpired(e.chat_id, e.turn_id, e.outcome, e.notice),
    ),
    rules.NowIdle: ("transport", lambda e: Idle(e.chat_id)),
    rules.RoutePromotion: ("gate", lambda e: DecidePromotion(e.decision)),
    rules.TakeParked: ("approvals", lambda e: TakeApproval(e.decision, e.tapped_at)),
    rules.Resume: ("turn", lambda e: StartResume(e.request)),
    rules.Strike: ("strikes", lambda e: StrikeTools(e.chat_id, e.failures)),
}
"""Effects that are one message to one peer: the peer's role and the message."""


class InboxOutOfStep(RuntimeError):
    """A row the arbiter decided on was taken behind its back: its state is suspect, so it
    crashes and is rebuilt from sqlite."""


class ArbiterActor(ContractActor):
    """Admits one turn at a time and keeps the schedule and the daily budget."""

    def __init__(self) -> None:
        super().__init__()
        self.settings: Settings | None = None
        self.peers: dict[str, Any] = {}
        self.store: Store | None = None
        self.selfcode: Toolbox | None = None
        self.arbiter: rules.Arbiter | None = None

    def receiveMsg_Wire(self, msg: Wire, sender: ActorAddress) -> None:
        self.settings, self.peers = msg.settings, msg.peers
        if self.store is None:
            self.store = Store(msg.settings.database)
        self.selfcode = Toolbox.from_settings(msg.settings, self.store)
        owners = rules.owners_of(
            msg.settings.telegram.allowed_users, console=msg.transport == "console"
        )
        if self.arbiter is not None:
            self.arbiter.owners = owners
            self._run([rules.Pump()])
            return
        self.arbiter = rules.Arbiter(msg.settings.limits, owners)
        started = self.arbiter.on_start(
            fresh=msg.fresh,
            console=msg.transport == "console",
            unanswered=self.store.unanswered_inbox(),
            unfinished=self.store.unfinished_inbox(),
            now=time.time(),
        )
        self._run([*started, rules.Pump()])
        self.wakeupAfter(dt.timedelta(seconds=0.05), payload="tick")

    def receiveMsg_PeerRestarted(self, msg: PeerRestarted, sender: ActorAddress) -> None:
        if msg.role == "turn" and self.arbiter is not None:
            self._run(self.arbiter.on_turn_lost())

    def receiveMsg_InboxChanged(self, msg: InboxChanged, sender: ActorAddress) -> None:
        if self.arbiter is not None:  # before its Wire, the inbox is read once wired
            self._run([rules.Pump()])

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: ActorAddress) -> None:
        if self.arbiter is None:
            return
        if msg.payload == "due":
            self._run([rules.Pump()])
        elif msg.payload == "expiry":
            self._run(self.arbiter.on_expiry_due(time.time()))
        elif msg.payload == "tick":
            self._run(self.arbiter.on_tick(time.time()))

    def receiveMsg_TurnEnded(self, msg: TurnEnded, sender: ActorAddress) -> None:
        if self.arbiter is not None:
            self._run(self.arbiter.on_turn_ended(msg.chat_id, msg.result))

    def receiveMsg_ApprovalTaken(self, msg: ApprovalTaken, sender: ActorAddress) -> None:
        if self.arbiter is not None:
            parked = msg.parked if msg.status == "ok" else None
            self._run(self.arbiter.on_approval_taken(msg.decision, parked, msg.status))

    # ---------------------------------------------------------------- effects

    def _run(self, effects: list[rules.Effect]) -> None:
        for effect in effects:
            self._carry_out(effect)

    def _carry_out(self, effect: rules.Effect) -> None:
        store, settings, arbiter = self.store, self.settings, self.arbiter
        assert store is not None and settings is not None and arbiter is not None
        now = time.time()
        if type(effect) in SENDS:
            role, message = SENDS[type(effect)]
            self.send(self.peers[role], message(effect))
            return
        match effect:
            case rules.Pump(idle_chat):
                self._run(arbiter.on_inbox(self._inbox_view(store, now), idle_chat))
            case rules.TakeRow(item_id, turn_id):
                if not store.take_inbox(item_id, now, turn_id=turn_id):
                    raise InboxOutOfStep(f"inbox row {item_id} was taken by someone else")
            case rules.AnswerCommand(chat_id, name, arg):
                assert self.selfcode is not None
                text = answer_command(
                    name, arg, store, self.selfcode, settings, now, chat_id=chat_id
                )
                self.send(self.peers["transport"], Reply(chat_id, text))
            case rules.BeginTurn():
                self._begin(store, settings, effect)
            case rules.FinishInbox(turn_id):
                store.finish_inbox(turn_id, now)
            case rules.RecordReply(chat_id, text):
                store.append_message(chat_id, "assistant", text, now)
            case rules.ApplyOp(turn_id, chat_id, op):
                self._apply(store, turn_id, chat_id, op, now)
            case rules.TakeRepair() | rules.DropRepair() | rules.SpendBudget():
                self._repair(store, settings, arbiter, effect, now)
            case rules.StartDue(schedule_id, day):
                self._start_due(store, schedule_id, now)
                if not store.spend_budget(day, 1, settings.limits.daily_turn_budget):
                    raise InboxOutOfStep(f"the budget of {day} was spent behind my back")
            case rules.RefuseDue(schedule_id, prompt):
                self._start_due(store, schedule_id, now)
                detail = {"reason": "daily budget spent"}
                store.audit("arbiter", "schedule_refused", prompt, detail, now)
            case rules.ExpireParked(at, keep):
                self._expire(store, at, keep)
            case rules.Abandon(item_ids):
                store.abandon_inbox(list(item_ids), now)
            case rules.Reoffer():
                again = store.reoffer_inbox()
                if again:
                    log.warning("turns_cut_short_reoffered", messages=again)
            case rules.ArmTick():
                delay = rules.tick_delay(store.next_due(), time.time())
                self.wakeupAfter(dt.timedelta(seconds=delay), payload="tick")
            case _:
                raise TypeError(f"the arbiter has no way to carry out {effect!r}")

    def _expire(self, store: Store, at: float, keep: Collection[str]) -> None:
        expired = store.expire_pending(at, keep)
        for gone in expired:
            log.info("pending_expired", kind=gone.kind, turn_id=gone.turn_id)
            detail = {"kind": gone.kind}
            store.audit("arbiter", "expired", gone.summary, detail, at, turn_id=gone.turn_id)
        self._run(rules.expired_cards(expired, at))

    def _repair(
        self,
        store: Store,
        settings: Settings,
        arbiter: rules.Arbiter,
        effect: rules.TakeRepair | rules.DropRepair | rules.SpendBudget,
        now: float,
    ) -> None:
        match effect:
            case rules.TakeRepair(decision, turn_id):
                offer = store.take_repair(decision.turn_id, now, turn_id)
                spent = store.budget_spent(rules.budget_day(now))
                if offer is not None:
                    detail = {"round": offer.round + 1, "offer": decision.turn_id}
                    store.audit("owner", "repair_started", offer.name, detail, now, turn_id=turn_id)
                self._run(arbiter.on_repair_taken(decision, turn_id, offer, spent, now))
            case rules.DropRepair(decision):
                offer = store.take_repair(decision.turn_id, now)
                outcome = rules.EXPIRED
                if offer is not None:
                    detail = {"round": offer.round, "offer": decision.turn_id}
                    store.audit("owner", "repair_dropped", offer.name, detail, now)
                    outcome = f"🗑 Dropped {offer.name}."
                self.send(self.peers["transport"], Settle(decision, outcome))
            case rules.SpendBudget(day):
                if not store.spend_budget(day, 1, settings.limits.daily_turn_budget):
                    raise InboxOutOfStep(f"the budget of {day} was spent behind my back")

    def _start_due(self, store: Store, schedule_id: int, now: float) -> None:
        if not store.start_due(schedule_id, now):
            raise InboxOutOfStep(f"scheduled turn {schedule_id} was started already")

    def _inbox_view(self, store: Store, now: float) -> rules.InboxView:
        return rules.inbox_view(
            rows=[(item.id, item.blob) for item in store.inbox()],
            parked=[(p.kind, p.turn_id) for p in store.pending()],
            due=store.due(now, limit=DUE_AT_ONCE),
            spent_today=store.budget_spent(rules.budget_day(now)),
            now=now,
        )

    def _begin(self, store: Store, settings: Settings, begin: rules.BeginTurn) -> None:
        roles = {"user": Role.USER, "assistant": Role.ASSISTANT}
        stored = tuple(
            Message(roles[m.role], m.content)
            for m in store.recent_messages(begin.chat_id, limit=40)
            if m.role in roles
        )
        # Only the window the prompt will use travels to the worker: a long conversation must
        # never make the request too big to hand over (nor slower to encode).
        request = TurnRequest(
            turn_id=begin.turn_id,
            chat_id=begin.chat_id,
            text=begin.text,
            history=recent_history(stored, settings.limits.history_chars),
            facts=tuple(store.facts()),
            source=begin.source,
        )
        self.send(self.peers["turn"], StartTurn(request))
        log.info("turn_started", turn_id=begin.turn_id, source=begin.source)
        store.append_message(begin.chat_id, "user", begin.record or begin.text, time.time())

    def _apply(self, store: Store, turn_id: str, chat_id: int, op: Op, now: float) -> None:
        if isinstance(op, RequestToolApproval):
            self.send(self.peers["approvals"], ParkApproval(turn_id, chat_id, op))
            # Told when it expires, not up to a tick later.
            ttl = self.settings.limits.approval_ttl_s if self.settings else 0
            self.wakeupAfter(dt.timedelta(seconds=ttl + 0.05), payload="expiry")
        elif isinstance(op, ProposeTool):
            # Each proposal gets its own id: a turn may propose several tools. Its repair round
            # comes from the store's record of the turn, never from the proposal.
            job = GateTool(rules.new_turn_id("p"), chat_id, op, store.repair_round_of(turn_id))
            self.send(self.peers["gate"], job)
        elif isinstance(op, Remember):
            store.remember(op.fact, now)
        elif isinstance(op, Schedule):
            store.schedule(chat_id, op.at, op.prompt, now)
            log.info("turn_scheduled", at=op.at, prompt=op.prompt[:80])
            self.wakeupAfter(dt.timedelta(seconds=max(0.05, op.at - now)), payload="due")
