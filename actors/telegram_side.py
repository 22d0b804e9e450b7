"""The Telegram side of the TransportActor: the ``TelegramLink`` runs on an asyncio loop in a
thread (``AsyncBridge``), so a long poll never blocks sending; this side submits the sends and
turns what the loop reports into messages for the arbiter and the supervisor."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import structlog

from actors.bridge import AsyncBridge
from actors.messages import Fatal, InboxChanged, PhotoBytes, TransportPolling, Typing
from actors.transport_side import TransportSide
from shelldon.config import Settings
from shelldon.rules.effects import AskOwner, ExpireCard, Say, SettleTap

if TYPE_CHECKING:
    from actors.transport import TransportActor
    from shelldon.transport.telegram_link import TelegramLink

log = structlog.get_logger(__name__)


class TelegramSide(TransportSide):
    """The Bot API: polls for updates and sends replies, keyboards and outcomes."""

    def __init__(self, actor: TransportActor, settings: Settings) -> None:
        super().__init__(actor)
        from shelldon.preflight import EXIT_CONFIG
        from shelldon.secrets import SecretMissingError, read_secret
        from shelldon.transport.telegram_errors import InvalidEndpoint
        from shelldon.transport.telegram_link import TelegramLink

        self.bridge: AsyncBridge | None = AsyncBridge("telegram")
        self.telegram: TelegramLink | None = None
        actor.watch(self.bridge.fileno())
        # `shelldon run` checked the token before starting; this catches what changed since.
        try:
            token = read_secret("telegram_token", settings.vault)
            self.telegram = TelegramLink(settings, token, self.bridge)
        except (SecretMissingError, InvalidEndpoint) as exc:
            actor.send(actor.peers["supervisor"], Fatal(str(exc), EXIT_CONFIG))
            return
        self.bridge.submit(self.telegram.run(), "poller")

    def _drain_bridge(self) -> None:
        assert self.bridge is not None
        from shelldon.transport.telegram_errors import TelegramError

        peers = self.actor.peers
        for tag, value, error in self.bridge.drain():
            if tag == "photo":
                # Before the InboxChanged of its message: the broker has the bytes first.
                self.actor.send(peers["broker"], PhotoBytes(value.photo, value.data))
            elif tag == "inbox":
                self.actor.send(peers["arbiter"], InboxChanged())
            elif tag == "polling":
                self.actor.send(peers["supervisor"], TransportPolling())
            elif error is None:
                continue
            elif tag == "poller":
                if isinstance(error, TelegramError) and error.fatal:
                    # The client has logged it once already; the supervisor stops the service.
                    status = error.exit_status
                else:
                    log.error("telegram_stopped", error=str(error))
                    status = 1
                self.actor.send(peers["supervisor"], Fatal(f"telegram: {error}", status))
            else:
                log.warning("telegram_send_failed", what=str(tag), error=str(error))

    def ready(self, fds: list[int]) -> None:
        if self.bridge is not None and self.bridge.fileno() in fds:
            self._drain_bridge()

    def reply(self, msg: Say) -> None:
        if self.telegram is not None and self.bridge is not None:
            reply = self.telegram.reply(msg.chat_id, msg.text, msg.markdown_chars)
            self.bridge.submit(reply, ("reply", msg.chat_id))

    def typing(self, msg: Typing) -> None:
        if self.telegram is not None and self.bridge is not None:
            self.bridge.submit(self.telegram.typing(msg.chat_id), ("typing", msg.chat_id))

    def ask(self, msg: AskOwner) -> None:
        if self.telegram is not None and self.bridge is not None:
            self.bridge.submit(self.telegram.ask(msg), ("ask", msg.turn_id))

    def settle(self, msg: SettleTap) -> None:
        if self.telegram is not None and self.bridge is not None:
            self.bridge.submit(self.telegram.settle(msg), ("settle", msg.decision.turn_id))

    def expire(self, msg: ExpireCard) -> None:
        if self.telegram is not None and self.bridge is not None:
            self.bridge.submit(self.telegram.expire(msg), ("expire", msg.turn_id))

    def close(self) -> None:
        if self.bridge is not None:
            if self.telegram is not None:
                with contextlib.suppress(Exception):
                    self.bridge.submit(self.telegram.close(), "close").result(2)
            self.bridge.close()
            self.bridge = None
