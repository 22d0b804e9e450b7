"""StrikeLedgerActor: debits a strike per self-coded tool failure (never a built-in's) and
tells the supervisor when a tool reaches the threshold."""

from __future__ import annotations

import time

import structlog
from thespian.actors import ActorAddress

from actors.messages import QuarantineDue, StrikeTools
from actors.wired import WiredActor

log = structlog.get_logger(__name__)


class StrikeLedgerActor(WiredActor):
    """Owns tool_health."""

    def receiveMsg_StrikeTools(self, msg: StrikeTools, sender: ActorAddress) -> None:
        assert self.store is not None and self.settings is not None
        threshold = self.settings.limits.strike_threshold
        for failure in msg.failures:
            if not failure.self_coded:
                continue
            strikes = self.store.strike(failure.name, failure.error, time.time())
            log.warning(
                "tool_struck", tool=failure.name, strikes=strikes, error=failure.error[:300]
            )
            if strikes >= threshold:
                self.send(
                    self.peers["supervisor"],
                    QuarantineDue(msg.chat_id, failure.name, strikes, failure.error),
                )
