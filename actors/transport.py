"""TransportActor: the front door. Inbound events are durably handed off to the inbox table
before anything else (then the arbiter is told); outbound replies, approval keyboards and
outcomes go to the owner. The transport itself is a ``TransportSide``: Telegram
(``actors/telegram_side.py``) or the console (``actors/console_side.py``)."""

from __future__ import annotations

from thespian.actors import ActorAddress, ActorExitRequest, WakeupMessage, WatchMessage

from actors.console_side import ConsoleSide
from actors.messages import TransportPolling, Typing, Wire
from actors.telegram_side import TelegramSide
from actors.transport_side import TransportSide
from actors.wired import WiredActor
from shelldon.rules.effects import AskOwner, ExpireCard, NowIdle, Say, SettleTap


class TransportActor(WiredActor):
    """Hosts the configured transport; the only actor besides the broker that holds a secret."""

    def __init__(self) -> None:
        super().__init__()
        self.side = TransportSide(self)

    def wired(self, msg: Wire, *, first: bool) -> None:
        if not first:
            return
        if msg.boot.transport == "console":
            self.side = ConsoleSide(self, msg.boot)
            self.send(self.peers["supervisor"], TransportPolling())
        else:
            self.side = TelegramSide(self, msg.boot.settings)

    def receiveMsg_WatchMessage(self, msg: WatchMessage, sender: ActorAddress) -> None:
        self.side.ready(msg.ready)

    def receiveMsg_Say(self, msg: Say, sender: ActorAddress) -> None:
        self.side.reply(msg)

    def receiveMsg_Typing(self, msg: Typing, sender: ActorAddress) -> None:
        self.side.typing(msg)

    def receiveMsg_AskOwner(self, msg: AskOwner, sender: ActorAddress) -> None:
        self.side.ask(msg)

    def receiveMsg_SettleTap(self, msg: SettleTap, sender: ActorAddress) -> None:
        self.side.settle(msg)

    def receiveMsg_ExpireCard(self, msg: ExpireCard, sender: ActorAddress) -> None:
        self.side.expire(msg)

    def receiveMsg_NowIdle(self, msg: NowIdle, sender: ActorAddress) -> None:
        self.side.idle()

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: ActorAddress) -> None:
        self.side.wakeup(msg.payload)

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: ActorAddress) -> None:
        self.side.close()
