"""The long-poll loop: every update is handed off durably, recorded, then confirmed.

For each update, in order: skip it if the ledger has it; else ``await handoff(event)``, which
returns only once the event is durably stored; then ``ledger.mark_processed(update_id)``; and
only then does the next getUpdates offset move past it (the offset is what confirms updates to
Telegram). A crash anywhere before ``mark_processed`` re-delivers the update on restart; the
ledger (and ``InboundMessage.update_id``, for a crash between handoff and mark) keep it from
being processed twice. Every callback query is answered, so no client spinner hangs.

While the pet has no owner, each round first asks ``OwnerPairing`` whether the config names
one now (``shelldon pair`` wrote it), and a stranger's private message is handed to it to be
answered with a code, never to the inbox.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from shelldon.contracts import Decision, InboundMessage
from shelldon.rules.commands import OWNER_COMMANDS
from shelldon.transport.photos import WantedPhoto
from shelldon.transport.render import escape
from shelldon.transport.telegram import BotApi, RetryPolicy, Sleep
from shelldon.transport.telegram_errors import BadRequest, TelegramError, unless_fatal
from shelldon.transport.updates import (
    PairingRequest,
    Parsed,
    Rejected,
    UpdateRules,
    offset_past,
    parse_update,
    update_id_of,
)

log = structlog.get_logger(__name__)

INVALID_BUTTON_NOTICE = "That button is not valid any more."


class Ledger(Protocol):
    """Durable record of the update ids already handed off (the lead's sqlite store); an id is
    marked durably before it is confirmed to Telegram."""

    def is_processed(self, update_id: int) -> bool: ...

    def mark_processed(self, update_id: int) -> None: ...


class OwnerPairing(Protocol):
    """Pairs the first owner (``TelegramLink``): answers strangers with codes, and learns the
    owner ``shelldon pair`` named."""

    async def offer_code(self, request: PairingRequest) -> None: ...

    async def paired_owners(self) -> frozenset[int]: ...


Handoff = Callable[[InboundMessage | Decision | WantedPhoto], Awaitable[str | None]]
"""Stores an event durably and returns; for a Decision its result is the tap's notice text.
A ``WantedPhoto`` is fetched first (bounded in bytes and time) and handed off as a message."""


class Poller:
    """Polls getUpdates and hands each update off exactly once; cancel ``run`` to stop."""

    def __init__(
        self,
        api: BotApi,
        rules: UpdateRules,
        ledger: Ledger,
        handoff: Handoff,
        *,
        poll_timeout_s: int = 30,  # Telegram long polls; >= 25 in production, short in tests
        retry: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        on_polling: Callable[[], None] | None = None,
        pairing: OwnerPairing | None = None,
    ) -> None:
        self._api = api
        self._rules = rules
        self._ledger = ledger
        self._handoff = handoff
        self._poll_timeout_s = poll_timeout_s
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self.offset: int | None = None  # the next getUpdates offset: one past the last taken
        # Called once, after the first command registration attempt: the service is up (READY).
        self._on_polling = on_polling
        self._pairing = pairing

    async def start(self) -> None:
        """Register the owner's command menu."""
        await self._api.set_my_commands(OWNER_COMMANDS)

    async def run(self) -> None:
        """Register commands, then poll until cancelled or a fatal error (raised, already logged
        as ``telegram.fatal``, for the caller to exit with its ``exit_status``). Transient
        failures are waited out with growing backoff: the pet polls through an outage."""
        commands_pending = True
        failures = 0
        while True:
            try:
                if commands_pending:
                    commands_pending = not await self._register_commands()
                if self._on_polling is not None:
                    self._on_polling()
                    self._on_polling = None
                await self.poll_once()
                failures = 0
            except TelegramError as exc:
                if exc.fatal:
                    raise
                delay = self._retry.backoff(min(failures, 16))
                failures += 1
                log.warning("telegram.poll_failed", error=str(exc), delay_s=round(delay, 3))
                await self._sleep(delay)

    async def _register_commands(self) -> bool:
        """Try to register the command menu; True when done (or when retrying cannot help)."""
        try:
            await self.start()
        except BadRequest as exc:
            log.error("telegram.commands_refused", error=str(exc))
            return True
        except TelegramError as exc:
            if exc.fatal:
                raise
            log.warning("telegram.commands_not_registered_yet", error=str(exc))
            return False
        return True

    async def poll_once(self) -> int:
        """One getUpdates round: take every update it returns, in order; return how many."""
        updates = await self._api.get_updates(self.offset, self._poll_timeout_s)
        if not self._rules.owners and self._pairing is not None:
            owners = await self._pairing.paired_owners()
            if owners:  # from now on, updates are read as the owner's or a stranger's
                self._rules = dataclasses.replace(self._rules, owners=owners)
        for raw in updates:
            update_id = update_id_of(raw)
            if update_id is None:
                # Logged and confirmed, so a server that sends it cannot make the pet poll it
                # forever; only the id's type and length are logged, never the update.
                raw_id = raw.get("update_id") if isinstance(raw, dict) else None
                log.warning(
                    "telegram.update_without_id_dropped",
                    id_type=type(raw_id).__name__,
                    id_digits=len(str(raw_id)) if type(raw_id) is int else None,
                )
                self.offset = offset_past(self.offset, raw)
                continue
            if self.offset is not None and update_id < self.offset:
                continue
            await self._take(update_id, raw)
            self.offset = update_id + 1
        return len(updates)

    async def _take(self, update_id: int, raw: object) -> None:
        parsed = parse_update(raw, self._rules)
        notice, told = None, False
        try:
            notice, told = await self._store(update_id, parsed)
        except Exception:
            # One update that cannot be stored must not stop the pet (unconfirmed, it would
            # come back at every restart and crash it again): log it, drop it, and go on; the
            # caller confirms it with the next offset.
            log.exception("telegram.update_not_stored", update_id=update_id)
        # Every tap is answered, a re-delivered one too: the crash may have come before that.
        if isinstance(parsed, Decision | Rejected):
            await self._answer(parsed.callback_id, notice)
        if told and isinstance(parsed, Rejected):
            await self._tell(parsed.chat_id, parsed.notice)
        elif told and isinstance(parsed, PairingRequest) and self._pairing is not None:
            await self._offer(parsed, self._pairing)

    async def _store(self, update_id: int, parsed: Parsed) -> tuple[str | None, bool]:
        """Hand ``parsed`` off and record ``update_id``; return what its tap is answered, and
        whether the sender is to be answered: the update's ``notice``, or a pairing code (once,
        not on a re-delivery)."""
        if self._ledger.is_processed(update_id):
            log.info("telegram.duplicate_update_skipped", update_id=update_id)
            return None, False
        if isinstance(parsed, PairingRequest):
            log.info("telegram.pairing_request", update_id=update_id, user_id=parsed.user_id)
            self._ledger.mark_processed(update_id)
            return None, True
        if isinstance(parsed, Rejected):
            log.warning(
                "telegram.update_dropped",
                update_id=update_id,
                user_id=parsed.user_id,
                reason=parsed.reason,
            )
            self._ledger.mark_processed(update_id)
            tap = INVALID_BUTTON_NOTICE if parsed.from_owner else None
            return tap, bool(parsed.notice and parsed.chat_id)
        notice = await self._handoff(parsed)
        self._ledger.mark_processed(update_id)
        return (notice if isinstance(parsed, Decision) else None), False

    async def _tell(self, chat_id: int, notice: str) -> None:
        """Tell the owner why an update of theirs starts nothing (best effort: the update is
        already confirmed, and a lost notice costs nothing but the courtesy)."""
        with unless_fatal("telegram.notice_not_sent", chat_id=chat_id):
            await self._api.send_message(chat_id, escape(notice))

    async def _offer(self, request: PairingRequest, pairing: OwnerPairing) -> None:
        """Answer a would-be owner (best effort, like ``_tell``: the update is confirmed)."""
        try:
            await pairing.offer_code(request)
        except TelegramError as exc:
            if exc.fatal:
                raise  # run() stops
            log.info("telegram.pairing_code_not_sent", user_id=request.user_id, error=str(exc))
        except Exception:
            log.exception("telegram.pairing_failed", user_id=request.user_id)

    async def _answer(self, callback_id: str, text: str | None) -> None:
        if not callback_id:
            return
        # An old or doubly answered query fails: the spinner is gone either way.
        with unless_fatal("telegram.answer_failed"):
            await self._api.answer_callback_query(callback_id, text)
