"""ApprovalStoreActor: parks RISKY calls in sqlite with a TTL and asks the owner; takes them
back exactly once when the owner decides, auditing the exact call either way."""

from __future__ import annotations

import time

import structlog
from thespian.actors import ActorAddress

from actors.messages import TOOL_REFUSED, ApprovalTaken, AskOwner, ParkApproval, Reply, TakeApproval
from actors.wired import WiredActor
from shelldon.contracts import ContractError, RequestToolApproval, decode, encode
from shelldon.rules.replies import approval_question
from shelldon.rules.risky import describe_call, park_refusal, refused_park_text

log = structlog.get_logger(__name__)


class ApprovalStoreActor(WiredActor):
    """Owns pending_approvals: park, take, audit."""

    def receiveMsg_ParkApproval(self, msg: ParkApproval, sender: ActorAddress) -> None:
        assert self.store is not None and self.settings is not None
        now, call = time.time(), msg.op.call
        refusal = park_refusal(call)
        if refusal:
            # Nothing is parked, so no tap can ever run it; the owner hears what was asked.
            log.warning("park_refused", turn_id=msg.turn_id, tool=call.name, why=refusal)
            self.store.audit(
                "approvals",
                "refused",
                call.name,
                {"args": call.args, "why": refusal},
                now,
                turn_id=msg.turn_id,
            )
            text = refused_park_text(call, refusal)
            self.send(self.peers["transport"], Reply(msg.chat_id, text, TOOL_REFUSED))
            return
        self.store.park_approval(
            msg.turn_id,
            msg.chat_id,
            encode(msg.op),
            describe_call(call),
            now,
            self.settings.limits.approval_ttl_s,
        )
        self.store.audit(
            "worker", "requested", call.name, {"args": call.args}, now, turn_id=msg.turn_id
        )
        # The parent's own words for the call, never the worker's summary of it.
        question = approval_question(describe_call(call))
        self.send(self.peers["transport"], AskOwner(msg.chat_id, msg.turn_id, question, call=call))

    def receiveMsg_TakeApproval(self, msg: TakeApproval, sender: ActorAddress) -> None:
        assert self.store is not None
        now, decision = time.time(), msg.decision
        # A tap queued behind a running turn counts from when it was accepted.
        taken = self.store.take_approval(decision.turn_id, msg.tapped_at or now)
        if taken.status != "ok":
            log.info("approval_not_taken", turn_id=decision.turn_id, status=taken.status)
            self.send(sender, ApprovalTaken(decision, taken.status))
            return
        try:
            parked = decode(taken.blob)
            if not isinstance(parked, RequestToolApproval):
                raise ContractError(f"parked blob holds {type(parked).__name__}")
        except ContractError as exc:
            log.error("parked_approval_corrupt", turn_id=decision.turn_id, error=str(exc))
            self.store.audit(
                "approvals",
                "corrupt",
                decision.turn_id,
                {"error": str(exc)},
                now,
                turn_id=decision.turn_id,
            )
            self.send(sender, ApprovalTaken(decision, "corrupt"))
            return
        action = "approved" if decision.approved else "denied"
        self.store.audit(
            "owner",
            action,
            parked.call.name,
            {"args": parked.call.args},
            now,
            turn_id=decision.turn_id,
        )
        self.send(sender, ApprovalTaken(decision, "ok", parked))
