"""GateRunnerActor, the toolbox's one owner: stages a proposed tool, gates it (AST checks +
sandboxed pytest) without blocking its mailbox, parks a passing tool for the owner's tap,
promotes or discards it, and quarantines a tool that reached the strike threshold."""

from __future__ import annotations

import collections
import datetime as dt
import time
from pathlib import Path

import structlog
from thespian.actors import ActorAddress, ActorExitRequest, WakeupMessage, WatchMessage

from actors.messages import TOOL_REFUSED, GateTool, QuarantineDue, Wire
from actors.wired import WiredActor
from shelldon.contracts import Decision
from shelldon.proc.child import SpawnError
from shelldon.rules import promotion
from shelldon.rules.effects import RecordReply, RoutePromotion, Say, SettleTap
from shelldon.rules.promotion import Proposal
from shelldon.rules.strikes import quarantine_reason, quarantined_text
from shelldon.toolbox.gate import GateLimits, GateRun, PendingGate
from shelldon.toolbox.toolbox import LiveSource, Staged, Toolbox, ToolboxError
from shelldon.worker.zygote import Zygote

log = structlog.get_logger(__name__)


class GateRunnerActor(WiredActor):
    """Runs one gate at a time (the Pi has little memory); queues the rest."""

    def __init__(self) -> None:
        super().__init__()
        self.selfcode: Toolbox | None = None
        self.queue: collections.deque[GateTool] = collections.deque()
        self.running: tuple[GateTool, GateRun, Staged, LiveSource | None] | None = None
        self.watched: int | None = None
        self.zygote: Zygote | None = None

    def wired(self, msg: Wire, *, first: bool) -> None:
        assert self.store is not None
        self.selfcode = Toolbox.from_settings(msg.boot.settings, self.store)
        self.zygote = msg.boot.zygote
        if first:
            # A gate cut short by a crash left its staging directory; parked promotions keep
            # their bytes in the store, so none is needed.
            self.selfcode.sweep_staging()

    def receiveMsg_GateTool(self, msg: GateTool, sender: ActorAddress) -> None:
        self.queue.append(msg)
        self._next()

    def _next(self) -> None:
        assert self.selfcode is not None
        while self.running is None and self.queue:
            job = self.queue.popleft()
            p = job.proposal
            try:
                # A replacement is staged beside the live version, which stays as it is
                # until the owner approves the new bytes.
                base = self.selfcode.replacement_base(p.name, p.replaces)
                staged = self.selfcode.stage(p.name, p.code, p.test, replace=base is not None)
            except ToolboxError as exc:
                text = f"I tried to write a tool called {p.name!r}, but: {exc}"
                self._tell(job.chat_id, text, kind=TOOL_REFUSED)
                continue
            run = self.selfcode.start_gate(staged, self._fork_gate)
            self.running = (job, run, staged, base)
            self.wakeupAfter(dt.timedelta(seconds=0.2), payload=("gate", job.turn_id))
            self._poll()

    def _fork_gate(
        self, staging: Path, private: Path, name: str, limits: GateLimits
    ) -> PendingGate:
        """The gate's pytest, forked by the zygote (this process holds secrets: it never forks
        model-written code); it arrives on a watched descriptor."""
        if self.zygote is None:
            raise SpawnError("no zygote to fork the gate: this process never forks")
        return self.zygote.begin_gate(staging, private, name, limits)

    def _poll(self) -> None:
        if self.running is None:
            return
        job, run, staged, base = self.running
        report = run.poll()
        fd = run.fd if report is None else None
        if fd != self.watched:  # the pytest arrived, or its output ended
            if self.watched is not None:
                self.unwatch(self.watched)
            if fd is not None:
                self.watch(fd)
            self.watched = fd
        if report is None:
            return
        self.running = None
        assert self.settings is not None
        proposal = Proposal(job.turn_id, job.chat_id, job.proposal, job.round)
        self._run(promotion.gated(proposal, staged, base, report, self.settings.limits))
        self._next()

    def receiveMsg_WatchMessage(self, msg: WatchMessage, sender: ActorAddress) -> None:
        self._poll()

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: ActorAddress) -> None:
        self._poll()
        if self.running is not None:
            self.wakeupAfter(dt.timedelta(seconds=0.2), payload=("gate", self.running[0].turn_id))

    def receiveMsg_RoutePromotion(self, msg: RoutePromotion, sender: ActorAddress) -> None:
        assert self.store is not None
        taken = self.store.parked.take_promotion(msg.decision.turn_id, time.time())
        self._run(promotion.promotion_taken(msg.decision, taken), msg.decision)

    def _run(self, effects: list[promotion.Effect], decision: Decision | None = None) -> None:
        for effect in effects:
            self._carry_out(effect, decision)

    def _carry_out(self, effect: promotion.Effect, decision: Decision | None) -> None:
        assert self.store is not None and self.selfcode is not None
        now, store = time.time(), self.store
        match effect:
            case promotion.Audit(actor, action, subject, detail, code_hash, turn_id):
                store.audit.record(
                    actor, action, subject, dict(detail), now, code_hash=code_hash, turn_id=turn_id
                )
            case promotion.ParkPromotion() as p:
                store.parked.park_promotion(
                    p.turn_id,
                    p.chat_id,
                    p.name,
                    p.code_hash,
                    p.summary,
                    now,
                    p.ttl_s,
                    code=p.code,
                    test=p.test,
                    replaces_hash=p.replaces_hash,
                )
                self.send(self.peers["transport"], p.ask)
            case promotion.ParkRepair(offer, summary, ttl_s, ask):
                store.parked.park_repair(offer, summary, now, ttl_s)
                self.send(self.peers["transport"], ask)
            case RecordReply(chat_id, text):
                store.conversation.append(chat_id, "assistant", text, now)
            case promotion.Refuse(chat_id, text, output):
                self._tell(chat_id, text, pre_output=output, kind=TOOL_REFUSED)
            case promotion.Promote() as p:
                assert decision is not None
                try:
                    self.selfcode.promote(
                        p.name,
                        p.code,
                        p.test,
                        expected_hash=p.code_hash,
                        replace=bool(p.replaces_hash),
                        replaces_hash=p.replaces_hash,
                        turn_id=p.turn_id,
                    )
                except ToolboxError as exc:
                    self._run(promotion.promoted(decision, p, str(exc)), decision)
                    return
                self._run(promotion.promoted(decision, p), decision)
            case promotion.ResetStrikes(name):
                store.tools.reset_strikes(name)
            case SettleTap():
                self.send(self.peers["transport"], effect)

    def receiveMsg_QuarantineDue(self, msg: QuarantineDue, sender: ActorAddress) -> None:
        assert self.store is not None and self.selfcode is not None
        reason = quarantine_reason(msg.strikes, msg.last_error)
        try:
            self.selfcode.quarantine(msg.name, reason)
        except ToolboxError as exc:
            log.info("quarantine_skipped", tool=msg.name, why=str(exc))
            return
        self.store.audit.record("toolbox", "quarantined", msg.name, {"reason": reason}, time.time())
        self._tell(msg.chat_id, quarantined_text(msg.name, msg.strikes, msg.last_error))

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: ActorAddress) -> None:
        if self.running is not None:
            self.running[1].kill()
            self.running = None

    def _tell(self, chat_id: int, text: str, pre_output: str = "", kind: str = "") -> None:
        if pre_output:
            text = f"{text}\n\n{pre_output}"
        self.send(self.peers["transport"], Say(chat_id, text, kind=kind))
