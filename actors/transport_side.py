"""``TransportSide``: the seam between the TransportActor and the transport it hosts. Each
method answers one message; a side that has nothing to do for it keeps the default."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors.messages import Typing
from shelldon.rules.effects import AskOwner, ExpireCard, Say, SettleTap

if TYPE_CHECKING:
    from actors.transport import TransportActor


class TransportSide:
    """One transport (the console or Telegram) as the actor sees it."""

    def __init__(self, actor: TransportActor) -> None:
        self.actor = actor

    def ready(self, fds: list[int]) -> None:
        """Some descriptor this side asked the actor to watch is readable."""

    def reply(self, msg: Say) -> None:
        """Show the owner a reply."""

    def typing(self, msg: Typing) -> None:
        """Show the owner that a turn is under way."""

    def ask(self, msg: AskOwner) -> None:
        """Ask the owner to decide a RISKY call or a promotion."""

    def settle(self, msg: SettleTap) -> None:
        """Tell the owner the outcome of a decision."""

    def expire(self, msg: ExpireCard) -> None:
        """Tell the owner an undecided question has expired."""

    def idle(self) -> None:
        """The arbiter has no turn running and none queued."""

    def wakeup(self, payload: object) -> None:
        """A timer this side set has fired."""

    def close(self) -> None:
        """The actor is exiting: release what this side holds."""
