"""The Telegram side of the TransportActor, living on its asyncio loop: the poller that hands
each update off durably, and the sends (replies, approval keyboards, outcomes, typing)."""

from __future__ import annotations

import time
from typing import Any, Protocol

import structlog

from shelldon.config import Settings
from shelldon.contracts import Decision, InboundMessage, encode
from shelldon.core.history import Store
from shelldon.transport.approvals import (
    APPROVE_LABELS,
    REPAIR_LABELS,
    approval_keyboard,
    callback_key,
    render_failed_gate,
    render_promotion,
    render_risky_approval,
)
from shelldon.transport.markdown import reply_html
from shelldon.transport.outbox import Outbox
from shelldon.transport.poller import Poller
from shelldon.transport.render import escape
from shelldon.transport.telegram import BotApi
from shelldon.transport.updates import UpdateRules

log = structlog.get_logger(__name__)

RECEIVED = "Got it."


class Notifier(Protocol):
    """Wakes the actor (``AsyncBridge.notify``)."""

    def notify(self, tag: Any, value: Any = None) -> None: ...


class TelegramLink:
    """Owns the BotApi session, the poller and the outbox. Create it on the actor's side; every
    coroutine runs on the bridge's loop (the sqlite store is opened there, on first use)."""

    def __init__(self, settings: Settings, token: str, notifier: Notifier) -> None:
        self.settings = settings
        self.notifier = notifier
        self.key = callback_key(token)
        self.api = BotApi(
            token,
            api_base=settings.telegram.api_base,
            request_timeout_s=settings.telegram.poll_timeout_s + 15,
        )
        self.outbox = Outbox(self.api)
        self.rules = UpdateRules.of(settings.telegram.allowed_users, self.key)
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        """The loop thread's own connection (sqlite connections stay in their thread)."""
        if self._store is None:
            self._store = Store(self.settings.database)
        return self._store

    async def handoff(self, event: InboundMessage | Decision) -> str | None:
        """Durably store an inbound event in the inbox, then wake the actor."""
        update_id = event.update_id or None
        fresh = self.store.put_inbox(encode(event), time.time(), update_id)
        if fresh:
            self.notifier.notify("inbox")
        return RECEIVED if isinstance(event, Decision) else None

    async def run(self) -> None:
        """Poll until cancelled; a fatal Bot API error (401, 409) is raised to the actor."""
        poller = Poller(
            self.api,
            self.rules,
            self.store,
            self.handoff,
            poll_timeout_s=self.settings.telegram.poll_timeout_s,
            on_polling=lambda: self.notifier.notify("polling"),
        )
        log.info("telegram_polling", api_base=self.settings.telegram.api_base)
        await poller.run()

    async def reply(self, chat_id: int, text: str, markdown_chars: int = 0) -> None:
        """Send the owner a reply whose first ``markdown_chars`` characters are the model's
        Markdown (rendered as Telegram HTML) and the rest plain text, split as needed."""
        await self.outbox.send_text(chat_id, reply_html(text, markdown_chars))

    async def typing(self, chat_id: int) -> None:
        """Show the typing indicator."""
        await self.api.send_chat_action(chat_id, "typing")

    async def ask(self, ask: Any) -> None:
        """Send an approval keyboard for a RISKY call, a promotion, or a failed gate's repair
        offer ("Try to fix" / "Drop")."""
        labels = APPROVE_LABELS
        if ask.call is not None:
            view = render_risky_approval(ask.call, ask.text)
        elif ask.failed:
            headline = ask.text.split("\n", 1)[0]
            view = render_failed_gate(ask.proposal.name, ask.gate_summary, ask.output, headline)
            labels = REPAIR_LABELS
        else:
            p = ask.proposal
            view = render_promotion(
                p.name, ask.description, p.code, p.test, ask.gate_summary, ask.replaces, ask.diff
            )
        keyboard = approval_keyboard(ask.turn_id, self.key, labels)
        await self.outbox.send_approval(ask.chat_id, view, keyboard)

    async def settle(self, settle: Any) -> None:
        """Show a decision's outcome: edit the keyboard away, or just answer when kept."""
        decision = settle.decision
        if settle.keep_keyboard or not decision.message_id:
            await self.outbox.send_text(decision.chat_id, escape(settle.outcome))
        else:
            await self.outbox.edit(decision.chat_id, decision.message_id, escape(settle.outcome))

    async def close(self) -> None:
        """Close the HTTP session and the store."""
        await self.api.close()
        if self._store is not None:
            self._store.close()
            self._store = None
