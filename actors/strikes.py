"""StrikeLedgerActor: debits a strike per self-coded tool failure (never a built-in's) and
tells the toolbox's owner (the gate runner) when a tool reaches the threshold."""

from __future__ import annotations

import time

import structlog
from thespian.actors import ActorAddress

from actors.messages import QuarantineDue
from actors.wired import WiredActor
from shelldon.rules.effects import Strike
from shelldon.rules.strikes import struck

log = structlog.get_logger(__name__)


class StrikeLedgerActor(WiredActor):
    """Owns tool_health."""

    def receiveMsg_Strike(self, msg: Strike, sender: ActorAddress) -> None:
        assert self.store is not None and self.settings is not None
        approved = (tool.name for tool in self.store.tools.approved())
        for failure in struck(msg.failures, approved):
            strikes = self.store.tools.strike(failure.name, failure.error, time.time())
            log.warning(
                "tool_struck", tool=failure.name, strikes=strikes, error=failure.error[:300]
            )
            if strikes >= self.settings.limits.strike_threshold:
                due = QuarantineDue(msg.chat_id, failure.name, strikes, failure.error)
                self.send(self.peers["gate"], due)
