"""ArbiterActor: one turn at a time. Reads the durable inbox, answers owner commands, routes
approval decisions before the slot, starts turns (chat first, then due scheduled turns within
the daily budget), and applies each finished turn's reply and ops."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
import uuid
from typing import Any

import structlog
from thespian.actors import ActorAddress, WakeupMessage

from actors.base import ContractActor
from actors.messages import (
    ApprovalTaken,
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
    ContractError,
    Decision,
    InboundMessage,
    Message,
    ProposeTool,
    Remember,
    RequestToolApproval,
    ResumeRequest,
    Role,
    Schedule,
    TurnRequest,
    decode,
)
from shelldon.core.arbiter import budget_day, command_of, left_behind, plan_inbox
from shelldon.core.history import Store
from shelldon.core.owner_commands import answer_command
from shelldon.core.selfcode import SelfCode
from shelldon.core.turnwatch import apology
from shelldon.transport.console import CONSOLE_CHAT
from shelldon.worker.prompt import recent_history

log = structlog.get_logger(__name__)

BUSY_REPLY = (
    "I'm still busy with your earlier messages, so I dropped this one — send it again in a bit."
)
TAP_AGAIN = "I'm in the middle of something — tap again in a moment."
EXPIRED = "That approval expired (or was already decided), so nothing ran."
TICK_S = 30.0


def new_turn_id(prefix: str = "t") -> str:
    """A short unique turn id (fits Telegram's 64-byte callback data with room to spare)."""
    return f"{prefix}{uuid.uuid4().hex[:16]}"


class ArbiterActor(ContractActor):
    """Admits one turn at a time and keeps the schedule and the daily budget."""

    def __init__(self) -> None:
        super().__init__()
        self.settings: Settings | None = None
        self.peers: dict[str, Any] = {}
        self.store: Store | None = None
        self.selfcode: SelfCode | None = None
        self.busy: str | None = None
        self.busy_chat = 0
        self.owners: set[int] = set()
        self.refused_budget_day = ""
        self.recovered_until = 0.0
        self.ticking = False

    # ---------------------------------------------------------------- wiring

    def receiveMsg_Wire(self, msg: Wire, sender: ActorAddress) -> None:
        first = self.settings is None
        self.settings, self.peers = msg.settings, msg.peers
        if self.store is None:
            self.store = Store(msg.settings.database)
        self.selfcode = SelfCode.from_settings(msg.settings, self.store)
        self.owners = set(msg.settings.telegram.allowed_users)
        if msg.transport == "console":
            self.owners.add(0)
        if first:
            self._recover(msg)
        if not self.ticking:
            self.ticking = True
            self.wakeupAfter(dt.timedelta(seconds=0.05), payload="tick")
        self._pump()

    def _recover(self, msg: Wire) -> None:
        """Messages whose turn started but never ended: after a service start (a crash or
        power cut ended that turn) they go back in the inbox and are answered again; after
        only this actor restarted, the turn actor is still running the turn, so wait for it."""
        assert self.store is not None and self.settings is not None
        if msg.fresh:
            if msg.transport == "console":
                self._forget_earlier_console_session()
            again = self.store.reoffer_inbox()
            if again:
                log.warning("turns_cut_short_reoffered", messages=again)
            return
        unfinished = self.store.unfinished_inbox()
        if unfinished:
            _item, turn_id, blob = unfinished[-1]
            try:
                event = decode(blob)
                self.busy_chat = event.chat_id if isinstance(event, InboundMessage) else 0
            except ContractError:
                self.busy_chat = 0
            self.busy = turn_id
            lim = self.settings.limits
            self.recovered_until = time.time() + lim.turn_timeout_s + lim.kill_grace_s + 5
            log.warning("turn_in_flight_adopted", turn_id=turn_id)

    def _forget_earlier_console_session(self) -> None:
        assert self.store is not None
        gone = left_behind(self.store.unanswered_inbox(), CONSOLE_CHAT)
        if not gone:
            return
        self.store.abandon_inbox([item_id for item_id, _ in gone], time.time())
        log.warning("console_input_left_behind", messages=len(gone))
        said = ", ".join(repr(text[:60]) for _, text in gone[:3])
        more = f" and {len(gone) - 3} more" if len(gone) > 3 else ""
        self.send(
            self.peers["transport"],
            Reply(
                CONSOLE_CHAT,
                f"(An earlier session ended before I answered {said}{more}; I won't answer "
                "that out of context now. Ask again if you still want it.)",
            ),
        )

    def receiveMsg_PeerRestarted(self, msg: PeerRestarted, sender: ActorAddress) -> None:
        if msg.role == "turn" and self.busy is not None:
            log.warning("turn_lost_with_turn_actor", turn_id=self.busy)
            self._finish_turn(self.busy_chat, apology(self.busy, "crash"), "owner")

    # ---------------------------------------------------------------- inbox

    def receiveMsg_InboxChanged(self, msg: InboxChanged, sender: ActorAddress) -> None:
        self._pump()

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: ActorAddress) -> None:
        if self.store is None:
            return
        if msg.payload == "due":
            self._pump()
            return
        if msg.payload != "tick":
            return
        now = time.time()
        if self.busy is not None and self.recovered_until and now > self.recovered_until:
            log.warning("adopted_turn_never_ended", turn_id=self.busy)
            self._finish_turn(self.busy_chat, apology(self.busy, "crash"), "owner")
        for gone in self.store.expire_pending(now):
            log.info("pending_expired", kind=gone.kind, turn_id=gone.turn_id)
            self.store.audit(
                "arbiter", "expired", gone.summary, {"kind": gone.kind}, now, turn_id=gone.turn_id
            )
        self._pump()
        next_due = self.store.next_due()
        delay = TICK_S if next_due is None else min(TICK_S, max(0.05, next_due - time.time()))
        self.wakeupAfter(dt.timedelta(seconds=delay), payload="tick")

    def _pump(self) -> None:
        store, settings = self.store, self.settings
        if store is None or settings is None:
            return
        now = time.time()
        rows = [(item.id, item.blob) for item in store.inbox()]
        plan = plan_inbox(rows, busy=self.busy is not None, max_queue=settings.limits.max_queue)
        for item_id, why in plan.bad:
            store.take_inbox(item_id, now)
            log.warning("inbox_item_dropped", item_id=item_id, error=why)
        for entry in plan.now:
            if store.take_inbox(entry.item_id, now):
                if isinstance(entry.event, Decision):
                    self._decide(entry.event)
                else:
                    self._command(entry.event)
        for entry in plan.busy:
            if store.take_inbox(entry.item_id, now):
                assert isinstance(entry.event, InboundMessage)
                self._reply(entry.event.chat_id, BUSY_REPLY)
        start = plan.start
        if self.busy is None and start is not None:
            turn_id = new_turn_id("t")
            if store.take_inbox(start.item_id, now, turn_id=turn_id):
                assert isinstance(start.event, InboundMessage)
                self._start_turn(start.event.chat_id, start.event.text, "owner", turn_id)
        if self.busy is None:
            self._start_scheduled(now)

    def _command(self, msg: InboundMessage) -> None:
        assert self.store and self.selfcode and self.settings
        parsed = command_of(msg.text)
        assert parsed is not None
        text = answer_command(*parsed, self.store, self.selfcode, self.settings, time.time())
        self._reply(msg.chat_id, text)

    # ---------------------------------------------------------------- turns

    def _history(self, chat_id: int) -> tuple[Message, ...]:
        assert self.store is not None and self.settings is not None
        roles = {"user": Role.USER, "assistant": Role.ASSISTANT}
        stored = tuple(
            Message(roles[m.role], m.content)
            for m in self.store.recent_messages(chat_id, limit=40)
            if m.role in roles
        )
        # Only the window the prompt will use travels to the worker: a long conversation must
        # never make the request too big to hand over (nor slower to encode).
        return recent_history(stored, self.settings.limits.history_chars)

    def _start_turn(self, chat_id: int, text: str, source: str, turn_id: str = "") -> None:
        assert self.store is not None
        turn_id = turn_id or new_turn_id("t" if source == "owner" else "s")
        request = TurnRequest(
            turn_id=turn_id,
            chat_id=chat_id,
            text=text,
            history=self._history(chat_id),
            facts=tuple(self.store.facts()),
            source=source,
        )
        self.busy, self.busy_chat = turn_id, chat_id
        self.send(self.peers["turn"], StartTurn(request))
        log.info("turn_started", turn_id=turn_id, source=source)
        self.store.append_message(chat_id, "user", text, time.time())

    def _start_scheduled(self, now: float) -> None:
        assert self.store is not None and self.settings is not None
        while due_now := self.store.take_due(now, limit=1):
            (due,) = due_now
            day = budget_day(now)
            if self.store.spend_budget(day, 1, self.settings.limits.daily_turn_budget):
                self._start_turn(due.chat_id, due.prompt, "schedule")
                return
            log.warning("scheduled_turn_refused_budget", prompt=due.prompt[:80], day=day)
            self.store.audit(
                "arbiter",
                "schedule_refused",
                due.prompt[:200],
                {"reason": "daily budget spent"},
                now,
            )
            if self.refused_budget_day != day:
                self.refused_budget_day = day
                self._reply(
                    due.chat_id,
                    "I skipped a scheduled task: today's budget for turns "
                    "I start myself is spent. /budget shows it.",
                )

    def receiveMsg_TurnEnded(self, msg: TurnEnded, sender: ActorAddress) -> None:
        if msg.result.turn_id != self.busy:
            log.warning("stray_turn_ended", turn_id=msg.result.turn_id, busy=self.busy)
            return
        self._finish_turn(msg.chat_id, msg.result, msg.source)

    def _finish_turn(self, chat_id: int, result: Any, source: str) -> None:
        assert self.store is not None and self.settings is not None
        now = time.time()
        self.busy = None
        self.recovered_until = 0.0
        self.store.finish_inbox(result.turn_id, now)
        if result.reply:
            self._reply(chat_id, result.reply)
            self.store.append_message(chat_id, "assistant", result.reply, now)
        for op in result.ops:
            self._apply(chat_id, result.turn_id, op, now)
        if result.tool_failures:
            self.send(self.peers["strikes"], StrikeTools(chat_id, result.tool_failures))
        self._pump()
        parked = any(isinstance(op, RequestToolApproval) for op in result.ops)
        if self.busy is None and not parked:
            # The conversation turn is complete (a parked one goes on after the decision).
            self.send(self.peers["transport"], Idle(chat_id))

    def _apply(self, chat_id: int, turn_id: str, op: Any, now: float) -> None:
        assert self.store is not None
        if isinstance(op, RequestToolApproval):
            self.send(self.peers["approvals"], ParkApproval(turn_id, chat_id, op))
        elif isinstance(op, ProposeTool):
            # Each proposal gets its own id: a turn may propose several tools.
            self.send(self.peers["gate"], GateTool(new_turn_id("p"), chat_id, op))
        elif isinstance(op, Remember):
            self.store.remember(op.fact, now)
        elif isinstance(op, Schedule):
            self.store.schedule(chat_id, op.at, op.prompt, now)
            log.info("turn_scheduled", at=op.at, prompt=op.prompt[:80])
            self.wakeupAfter(dt.timedelta(seconds=max(0.05, op.at - now)), payload="due")

    # ---------------------------------------------------------------- decisions

    def _decide(self, decision: Decision) -> None:
        assert self.store is not None
        if decision.user_id not in self.owners:
            log.warning("decision_from_stranger_dropped", user_id=decision.user_id)
            return
        if decision.approved is None:
            log.warning("malformed_decision_denied", turn_id=decision.turn_id)
            decision = dataclasses.replace(decision, approved=False)
        if self.store.has_promotion(decision.turn_id):
            self.send(self.peers["gate"], DecidePromotion(decision))
        elif self.store.has_approval(decision.turn_id):
            if self.busy is not None:
                self.send(self.peers["transport"], Settle(decision, TAP_AGAIN, keep_keyboard=True))
                return
            self.busy, self.busy_chat = decision.turn_id, decision.chat_id
            self.send(self.peers["approvals"], TakeApproval(decision))
        else:
            log.info("decision_for_nothing", turn_id=decision.turn_id)
            self.send(self.peers["transport"], Settle(decision, EXPIRED))

    def receiveMsg_ApprovalTaken(self, msg: ApprovalTaken, sender: ActorAddress) -> None:
        decision = msg.decision
        if msg.status != "ok" or msg.parked is None:
            if self.busy == decision.turn_id:
                self.busy = None
            self.send(self.peers["transport"], Settle(decision, EXPIRED))
            self._pump()
            return
        approved = bool(decision.approved)
        outcome = "✅ Approved — running it now." if approved else "❌ Denied — I won't run it."
        self.send(self.peers["transport"], Settle(decision, outcome))
        request = ResumeRequest(decision.turn_id, decision.chat_id, msg.parked, approved)
        log.info("turn_resumed", turn_id=decision.turn_id, approved=approved)
        self.send(self.peers["turn"], StartResume(request))

    def _reply(self, chat_id: int, text: str) -> None:
        self.send(self.peers["transport"], Reply(chat_id, text))
