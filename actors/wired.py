"""``WiredActor``: an actor the supervisor wires with a ``Wire`` message (settings and peer
addresses, re-sent whenever a peer restarts) and that owns its own sqlite connection."""

from __future__ import annotations

from typing import Any

from thespian.actors import ActorAddress, ActorExitRequest, ThespianWatch

from actors.base import ContractActor
from actors.messages import Wire
from shelldon.config import Settings
from shelldon.store import Store


class WiredActor(ContractActor):
    """Keeps ``settings``, ``peers`` and one ``store``; ``wired(msg, first)`` is its hook."""

    def __init__(self) -> None:
        super().__init__()
        self.settings: Settings | None = None
        self.peers: dict[str, Any] = {}
        self.store: Store | None = None

    def receiveMsg_Wire(self, msg: Wire, sender: ActorAddress) -> None:
        first = self.settings is None
        self.settings, self.peers = msg.boot.settings, msg.peers
        if self.store is None:
            self.store = Store(msg.boot.settings.database)
        self.wired(msg, first=first)

    def wired(self, msg: Wire, *, first: bool) -> None:
        """Called after every Wire; ``first`` on the one at start (a re-Wire after a peer's
        restart only changes addresses: never reload state on it)."""

    def receiveMessage(self, message: Any, sender: ActorAddress) -> ThespianWatch | None:
        """Route as the door does; on exit, close the store after the subclass's own exit
        handler ran (or raised), so an actor restarted after each crash leaks no connection."""
        watch = super().receiveMessage(message, sender)
        if isinstance(message, ActorExitRequest) and self.store is not None:
            self.store.close()
            self.store = None
        return watch
