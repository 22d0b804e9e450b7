"""The outbox: every message to the owner goes out in order, paced, flood control honoured.

Telegram asks bots to send about one message per second to a chat (short bursts pass) and
answers 429 with ``retry_after`` when they do not; ``BotApi`` waits that out for every call,
and the outbox spaces consecutive sends to one chat and keeps the chunks of a reply in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import structlog

from shelldon.transport.approvals import ApprovalView
from shelldon.transport.render import split_message
from shelldon.transport.telegram import BotApi, Clock, Sleep
from shelldon.transport.telegram_errors import TelegramError

log = structlog.get_logger(__name__)


class Outbox:
    """Sends texts, documents and edits one at a time, ``min_interval_s`` apart per chat."""

    def __init__(
        self,
        api: BotApi,
        *,
        min_interval_s: float = 0.5,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._api = api
        self._interval = min_interval_s
        self._clock = clock
        self._sleep = sleep
        self._lock = asyncio.Lock()  # FIFO: chunks and replies leave in the order queued
        self._last_sent: dict[int, float] = {}

    @contextlib.asynccontextmanager
    async def _paced(self, chat_id: int) -> AsyncIterator[None]:
        """Wait out ``min_interval_s`` since the chat's last send; a send in the block that
        succeeds is the new last one."""
        last = self._last_sent.get(chat_id)
        if last is not None:
            wait = last + self._interval - self._clock()
            if wait > 0:
                await self._sleep(wait)
        yield
        self._last_sent[chat_id] = self._clock()

    async def send_text(self, chat_id: int, text: str) -> tuple[int, ...]:
        """Send HTML ``text``, split into valid chunks; returns the sent message ids. An empty
        text sends nothing (Telegram refuses it)."""
        async with self._lock:
            return await self._send_chunks(chat_id, text)

    async def _send_chunks(self, chat_id: int, text: str) -> tuple[int, ...]:
        """``send_text`` for a caller that holds the lock."""
        chunks = split_message(text)
        if not chunks:
            log.warning("telegram.empty_reply_not_sent", chat_id=chat_id)
        ids = []
        for chunk in chunks:
            async with self._paced(chat_id):
                ids.append(await self._api.send_message(chat_id, chunk))
        return tuple(ids)

    async def send_approval(
        self, chat_id: int, view: ApprovalView, reply_markup: Mapping[str, Any]
    ) -> int:
        """Send an approval: its documents, then its text with the keyboard; returns that id."""
        async with self._lock:
            for document in view.documents:
                async with self._paced(chat_id):
                    await self._api.send_document(
                        chat_id,
                        document.filename,
                        document.content,
                        caption=document.caption or None,
                    )
            async with self._paced(chat_id):
                return await self._api.send_message(chat_id, view.text, reply_markup=reply_markup)

    async def close_card(
        self, chat_id: int, message_id: int, text: str | None, outcome: str | None
    ) -> None:
        """Show a card decided: edit it to its new HTML ``text``, keyboard gone, and send HTML
        ``outcome`` as a message of its own when the card does not show it: ``text`` None
        (the card keeps its text, only the keyboard goes), or Telegram refused the edit (a
        message over 48 hours old, or deleted). So an outcome is never only logged, and it
        reaches the chat before anything sent after it."""
        async with self._lock:
            shown = False
            try:
                async with self._paced(chat_id):
                    await self._api.close_message(chat_id, message_id, text)
                shown = text is not None
            except TelegramError as exc:
                if exc.fatal:
                    raise
                log.warning("telegram.card_not_edited", chat_id=chat_id, error=str(exc))
            if outcome is not None and not shown:
                await self._send_chunks(chat_id, outcome)
