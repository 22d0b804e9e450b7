"""ArbiterActor: the shell around ``shelldon.rules.arbiter.Arbiter``. It turns its messages into
the arbiter's events (reading the inbox when asked to) and carries out the effects it gets
back: messages to the other actors, rows taken or written in sqlite."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Collection

import structlog
from thespian.actors import ActorAddress, WakeupMessage

from actors.messages import (
    GateTool,
    InboxChanged,
    ParkApproval,
    PeerRestarted,
    StartTurn,
    TurnEnded,
    Wire,
)
from actors.wired import WiredActor
from shelldon.config import Settings, allowed_users_now
from shelldon.contracts import (
    Message,
    Op,
    ProposeTool,
    Remember,
    RequestToolApproval,
    Role,
    Schedule,
    TurnRequest,
    encode,
)
from shelldon.owner_commands import answer_command
from shelldon.replies import describe_call
from shelldon.rules import arbiter as rules
from shelldon.rules import effects as fx
from shelldon.rules.commands import owners_of
from shelldon.rules.effects import AskOwner, Say, SettleTap, TakeParked
from shelldon.rules.inbox_plan import inbox_view
from shelldon.rules.replies import EXPIRED, approval_question
from shelldon.store import Store
from shelldon.toolbox.toolbox import Toolbox
from shelldon.worker.prompt import recent_history

log = structlog.get_logger(__name__)

DUE_AT_ONCE = 50
"""Scheduled turns looked at per inbox read (the rest wait for the next one)."""


SENDS: dict[type, str] = {
    fx.Say: "transport",
    fx.SettleTap: "transport",
    fx.ExpireCard: "transport",
    fx.NowIdle: "transport",
    fx.RoutePromotion: "gate",
    # To itself: the approval is taken once the inbox read that asked for it is done.
    fx.TakeParked: "arbiter",
    fx.Resume: "turn",
    fx.Strike: "strikes",
}
"""Effects that are one message to one peer, sent as they are: the peer's role."""


class InboxOutOfStep(RuntimeError):
    """A row the arbiter decided on was taken behind its back: its state is suspect, so it
    crashes and is rebuilt from sqlite."""


class ArbiterActor(WiredActor):
    """Admits one turn at a time and keeps the schedule and the daily budget."""

    def __init__(self) -> None:
        super().__init__()
        self.selfcode: Toolbox | None = None
        self.arbiter: rules.Arbiter | None = None

    def wired(self, msg: Wire, *, first: bool) -> None:
        assert self.store is not None
        boot = msg.boot
        console = boot.transport == "console"
        self.selfcode = Toolbox.from_settings(boot.settings, self.store)
        owners = owners_of(boot.settings.telegram.allowed_users, console=console)
        if self.arbiter is not None:
            self.arbiter.owners = owners
            self._run([fx.Pump()])
            return
        self.arbiter = rules.Arbiter(boot.settings.limits, owners)
        started = self.arbiter.on_start(
            fresh=msg.fresh,
            console=console,
            unanswered=self.store.inbox.unanswered(),
            unfinished=self.store.inbox.unfinished(),
            now=time.time(),
        )
        self._run([*started, fx.Pump()])
        self.wakeupAfter(dt.timedelta(seconds=0.05), payload="tick")

    def receiveMsg_PeerRestarted(self, msg: PeerRestarted, sender: ActorAddress) -> None:
        if msg.role == "turn" and self.arbiter is not None:
            self._run(self.arbiter.on_turn_lost())

    def receiveMsg_InboxChanged(self, msg: InboxChanged, sender: ActorAddress) -> None:
        if self.arbiter is not None:  # before its Wire, the inbox is read once wired
            self._run([fx.Pump()])

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: ActorAddress) -> None:
        if self.arbiter is None:
            return
        if msg.payload == "due":
            self._run([fx.Pump()])
        elif msg.payload == "expiry":
            self._run(self.arbiter.on_expiry_due(time.time()))
        elif msg.payload == "tick":
            self._run(self.arbiter.on_tick(time.time()))

    def receiveMsg_TurnEnded(self, msg: TurnEnded, sender: ActorAddress) -> None:
        if self.arbiter is not None:
            self._run(self.arbiter.on_turn_ended(msg.chat_id, msg.result, msg.note))

    def receiveMsg_ParkApproval(self, msg: ParkApproval, sender: ActorAddress) -> None:
        if self.arbiter is not None:
            self._run(self.arbiter.on_park(msg.turn_id, msg.chat_id, msg.op))

    def receiveMsg_TakeParked(self, msg: TakeParked, sender: ActorAddress) -> None:
        store, _, arbiter = self._wired_parts()
        decision = msg.decision
        # A tap queued behind a running turn counts from when it was accepted.
        parked, status = store.parked.take_call(
            decision.turn_id, bool(decision.approved), time.time(), msg.tapped_at
        )
        self._run(arbiter.on_approval_taken(decision, parked, status))

    def _run(self, effects: list[fx.Effect]) -> None:
        for effect in effects:
            self._carry_out(effect)

    def _wired_parts(self) -> tuple[Store, Settings, rules.Arbiter]:
        store, settings, arbiter = self.store, self.settings, self.arbiter
        assert store is not None and settings is not None and arbiter is not None
        return store, settings, arbiter

    def _carry_out(self, effect: fx.Effect) -> None:
        store, settings, _ = self._wired_parts()
        now = time.time()
        if type(effect) in SENDS:
            self.send(self.peers[SENDS[type(effect)]], effect)
            return
        match effect:
            case fx.RefusePark(turn_id, call, why):
                detail = {"args": call.args, "why": why}
                store.audit.record("approvals", "refused", call.name, detail, now, turn_id=turn_id)
            case fx.Pump(idle_chat):
                self._pump(idle_chat, now)
            case fx.TakeRow(item_id, turn_id):
                if not store.inbox.take(item_id, now, turn_id=turn_id):
                    raise InboxOutOfStep(f"inbox row {item_id} was taken by someone else")
            case fx.AnswerCommand(chat_id, name, arg):
                assert self.selfcode is not None
                text = answer_command(
                    name, arg, store, self.selfcode, settings, now, chat_id=chat_id
                )
                self.send(self.peers["transport"], Say(chat_id, text))
            case fx.BeginTurn():
                self._begin(store, settings, effect)
            case fx.FinishInbox(turn_id):
                store.inbox.finish(turn_id, now)
            case fx.RecordReply(chat_id, text):
                store.conversation.append(chat_id, "assistant", text, now)
            case fx.ApplyOp(turn_id, chat_id, op):
                self._apply(turn_id, chat_id, op, now)
            case fx.TakeRepair() | fx.DropRepair() | fx.SpendBudget():
                self._repair(effect, now)
            case fx.StartDue(schedule_id, day):
                self._start_due(store, schedule_id, now)
                self._spend_budget(store, day, settings.limits.daily_turn_budget)
            case fx.RefuseDue(schedule_id, prompt):
                self._start_due(store, schedule_id, now)
                detail = {"reason": "daily budget spent"}
                store.audit.record("arbiter", "schedule_refused", prompt, detail, now)
            case fx.ExpireParked(at, keep):
                self._expire(store, at, keep)
            case fx.Abandon(item_ids):
                store.inbox.abandon(list(item_ids), now)
            case fx.Reoffer():
                again = store.inbox.reoffer()
                if again:
                    log.warning("turns_cut_short_reoffered", messages=again)
            case fx.ArmTick():
                delay = rules.tick_delay(store.schedule.next_due(), time.time())
                self.wakeupAfter(dt.timedelta(seconds=delay), payload="tick")
            case _:
                raise TypeError(f"the arbiter has no way to carry out {effect!r}")

    def _expire(self, store: Store, at: float, keep: Collection[str]) -> None:
        expired = store.parked.expire_pending(at, keep)
        for gone in expired:
            log.info("pending_expired", kind=gone.kind, turn_id=gone.turn_id)
            detail = {"kind": gone.kind}
            store.audit.record("arbiter", "expired", gone.summary, detail, at, turn_id=gone.turn_id)
        self._run(rules.expired_cards(expired, at))

    def _repair(self, effect: fx.TakeRepair | fx.DropRepair | fx.SpendBudget, now: float) -> None:
        store, settings, arbiter = self._wired_parts()
        match effect:
            case fx.TakeRepair(decision, turn_id):
                offer = store.parked.take_repair(decision.turn_id, now, turn_id)
                spent = store.schedule.budget_spent(rules.budget_day(now))
                if offer is not None:
                    detail = {"round": offer.round + 1, "offer": decision.turn_id}
                    store.audit.record(
                        "owner", "repair_started", offer.name, detail, now, turn_id=turn_id
                    )
                self._run(arbiter.on_repair_taken(decision, turn_id, offer, spent, now))
            case fx.DropRepair(decision):
                offer = store.parked.take_repair(decision.turn_id, now)
                outcome = EXPIRED
                if offer is not None:
                    detail = {"round": offer.round, "offer": decision.turn_id}
                    store.audit.record("owner", "repair_dropped", offer.name, detail, now)
                    outcome = f"🗑 Dropped {offer.name}."
                self.send(self.peers["transport"], SettleTap(decision, outcome))
            case fx.SpendBudget(day):
                self._spend_budget(store, day, settings.limits.daily_turn_budget)

    def _start_due(self, store: Store, schedule_id: int, now: float) -> None:
        if not store.schedule.start(schedule_id, now):
            raise InboxOutOfStep(f"scheduled turn {schedule_id} was started already")

    def _pump(self, idle_chat: int | None, now: float) -> None:
        store, settings, arbiter = self._wired_parts()
        view = inbox_view(
            rows=[(item.id, item.blob) for item in store.inbox.waiting()],
            parked=[(p.kind, p.turn_id) for p in store.parked.pending()],
            due=store.schedule.due(now, limit=DUE_AT_ONCE),
            spent_today=store.schedule.budget_spent(rules.budget_day(now)),
            now=now,
        )
        if view.rows and not arbiter.owners:
            # Started with no owner: the transport lets an event in only once `shelldon pair`
            # has named one in the config file, so read it again.
            arbiter.owners = owners_of(allowed_users_now(settings), console=False)
        self._run(arbiter.on_inbox(view, idle_chat))

    def _spend_budget(self, store: Store, day: str, budget: int) -> None:
        if not store.schedule.spend_budget(day, 1, budget):
            raise InboxOutOfStep(f"the budget of {day} was spent behind my back")

    def _begin(self, store: Store, settings: Settings, begin: fx.BeginTurn) -> None:
        roles = {"user": Role.USER, "assistant": Role.ASSISTANT}
        stored = tuple(
            Message(roles[m.role], m.content)
            for m in store.conversation.recent(begin.chat_id, limit=40)
            if m.role in roles
        )
        # Only the window the prompt will use travels to the worker: a long conversation must
        # never make the request too big to hand over (nor slower to encode).
        request = TurnRequest(
            turn_id=begin.turn_id,
            chat_id=begin.chat_id,
            text=begin.text,
            history=recent_history(stored, settings.limits.history_chars),
            facts=tuple(store.conversation.facts()),
            source=begin.source,
            photo=begin.photo,
        )
        self.send(self.peers["turn"], StartTurn(request))
        log.info("turn_started", turn_id=begin.turn_id, source=begin.source)
        store.conversation.append(begin.chat_id, "user", begin.record or begin.text, time.time())

    def _apply(self, turn_id: str, chat_id: int, op: Op, now: float) -> None:
        store, settings, _ = self._wired_parts()
        if isinstance(op, RequestToolApproval):
            summary = describe_call(op.call)
            limits = settings.limits
            store.parked.park_approval(
                turn_id, chat_id, encode(op), summary, now, limits.approval_ttl_s
            )
            detail = {"args": op.call.args}
            store.audit.record("worker", "requested", op.call.name, detail, now, turn_id=turn_id)
            # The parent's own words for the call, never the worker's summary of it.
            ask = AskOwner(chat_id, turn_id, approval_question(summary), call=op.call)
            self.send(self.peers["transport"], ask)
            # Told when it expires, not up to a tick later.
            self.wakeupAfter(dt.timedelta(seconds=limits.approval_ttl_s + 0.05), payload="expiry")
        elif isinstance(op, ProposeTool):
            # Each proposal gets its own id: a turn may propose several tools. Its repair round
            # comes from the store's record of the turn, never from the proposal.
            job = GateTool(
                rules.new_turn_id("p"), chat_id, op, store.parked.repair_round_of(turn_id)
            )
            self.send(self.peers["gate"], job)
        elif isinstance(op, Remember):
            store.conversation.remember(op.fact, now)
        elif isinstance(op, Schedule):
            store.schedule.add(chat_id, op.at, op.prompt, now)
            log.info("turn_scheduled", at=op.at, prompt=op.prompt[:80])
            self.wakeupAfter(dt.timedelta(seconds=max(0.05, op.at - now)), payload="due")
