"""The Telegram side of the TransportActor, living on its asyncio loop: the poller that hands
each update off durably, the sends (replies, approval keyboards, outcomes, typing), and, while
the pet has no owner, the pairing codes (``shelldon.rules.pairing``)."""

from __future__ import annotations

import time
from typing import Any, Protocol

import structlog

from shelldon.config import Settings, allowed_users_now
from shelldon.contracts import Decision, InboundMessage, encode
from shelldon.rules import pairing as pairing_rules
from shelldon.rules.commands import owners_of
from shelldon.store import PairingCode, Store
from shelldon.transport.approvals import (
    APPROVE_LABELS,
    REPAIR_LABELS,
    approval_keyboard,
    callback_key,
    decided_card,
    render_failed_gate,
    render_promotion,
    render_risky_approval,
)
from shelldon.transport.markdown import reply_html
from shelldon.transport.outbox import Outbox
from shelldon.transport.photos import PhotoCaps, Refused, WantedPhoto, fetch_photo, placeholder
from shelldon.transport.poller import Poller
from shelldon.transport.render import escape
from shelldon.transport.telegram import BotApi
from shelldon.transport.telegram_errors import TelegramError, unless_fatal
from shelldon.transport.updates import PairingRequest, UpdateRules

log = structlog.get_logger(__name__)

RECEIVED = "Got it."
OUT_OF_DATE = "That card is out of date: I asked again since. Nothing changed."


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
        photos = settings.photos
        self.photo_caps = (
            PhotoCaps(photos.max_px, photos.max_bytes, photos.fetch_timeout_s)
            if photos.enabled(settings.brain)
            else None
        )
        self.rules = UpdateRules.of(settings.telegram.allowed_users, self.key, self.photo_caps)
        self._store: Store | None = None
        self.clock = time.time  # what pairing codes are timed by (tests move it)

    @property
    def store(self) -> Store:
        """The loop thread's own connection (sqlite connections stay in their thread)."""
        if self._store is None:
            self._store = Store(self.settings.database)
        return self._store

    async def handoff(self, event: InboundMessage | Decision | WantedPhoto) -> str | None:
        """Durably store an inbound event in the inbox, then wake the actor. A tap on an
        older card of a turn that has asked again since decides nothing: its buttons (still
        there when Telegram refused to edit them away) must not approve the newer call. A
        photo is fetched first; the inbox keeps only its placeholder and key."""
        if isinstance(event, WantedPhoto):
            taken = await self.take_photo(event)
            if taken is None:
                return None
            event = taken
        if isinstance(event, Decision) and event.message_id:
            card = self.store.cards.get(event.turn_id)
            if card is not None and card.message_id != event.message_id:
                log.warning("tap_on_old_card", turn_id=event.turn_id, card=card.message_id)
                return OUT_OF_DATE
        update_id = event.update_id or None
        fresh = self.store.inbox.put(encode(event), time.time(), update_id)
        if fresh:
            self.notifier.notify("inbox")
        return RECEIVED if isinstance(event, Decision) else None

    async def take_photo(self, wanted: WantedPhoto) -> InboundMessage | None:
        """Fetch the photo into memory and hand its bytes to the broker (through the actor);
        the message keeps a placeholder in their place. A photo that cannot be taken gets one
        line to the owner, and its caption (if any) goes on as a message of its own."""
        assert self.photo_caps is not None  # parse_update makes a WantedPhoto only then
        got = await fetch_photo(self.api, wanted, self.photo_caps)
        if isinstance(got, Refused):
            log.info("photo_refused", update_id=wanted.update_id, reason=got.line)
            with unless_fatal("telegram.notice_not_sent", chat_id=wanted.chat_id):
                await self.outbox.send_text(wanted.chat_id, escape(got.line))
            if not wanted.caption.strip():
                return None
            return InboundMessage(wanted.chat_id, wanted.user_id, wanted.caption, wanted.update_id)
        photo = got.photo
        log.info("photo_taken", update_id=wanted.update_id, bytes=photo.size, type=photo.media_type)
        self.notifier.notify("photo", got)
        text = f"{placeholder(photo, wanted.kind)} {wanted.caption}".strip()
        return InboundMessage(wanted.chat_id, wanted.user_id, text, wanted.update_id, photo)

    async def run(self) -> None:
        """Poll until cancelled; a fatal Bot API error (401, 409) is raised to the actor."""
        poller = Poller(
            self.api,
            self.rules,
            self.store.inbox,
            self.handoff,
            poll_timeout_s=self.settings.telegram.poll_timeout_s,
            on_polling=lambda: self.notifier.notify("polling"),
            pairing=self,
        )
        log.info("telegram_polling", api_base=self.settings.telegram.api_base)
        await poller.run()

    async def offer_code(self, request: PairingRequest) -> None:
        """Answer a private message sent while the pet has no owner: a new code (audited; only
        its digest kept; withdrawn if it cannot be sent, so its user may ask again), a reminder
        of the code still good, or nothing (``pairing_rules.offer`` says which)."""
        now, store = self.clock(), self.store
        outstanding = store.pairing.outstanding(request.user_id, now)
        issued = store.pairing.issued_since(now - pairing_rules.CAP_WINDOW_S)
        verdict = pairing_rules.offer(outstanding, issued, now)
        if verdict.kind == "quiet":
            log.info("pairing_quiet", user_id=request.user_id, reason=verdict.reason)
            return
        if outstanding is not None:
            store.pairing.reminded(request.user_id, now)
            await self.outbox.send_text(
                request.chat_id, escape(pairing_rules.reminder_text(outstanding))
            )
            return
        code = pairing_rules.new_code()
        row = PairingCode(
            request.user_id,
            request.chat_id,
            request.name,
            request.username,
            pairing_rules.digest(code),
            now,
            now + pairing_rules.CODE_TTL_S,
        )
        store.pairing.issue(row)
        who = pairing_rules.who(request.name, request.username, request.user_id)
        detail = {"name": request.name, "username": request.username, "expires_at": row.expires_at}
        store.audit.record("telegram", "pairing_code_issued", str(request.user_id), detail, now)
        log.warning("pairing_code_issued", user_id=request.user_id, who=who)
        command = escape(f"sudo shelldon pair {pairing_rules.shown(code)}")
        text = escape(pairing_rules.code_text(code, request.name))
        try:  # the command in <code>: one tap copies it
            await self.outbox.send_text(
                request.chat_id, text.replace(command, f"<code>{command}</code>")
            )
        except TelegramError:
            store.pairing.withdraw(request.user_id, row.digest)
            raise

    async def paired_owners(self) -> frozenset[int]:
        """The owners the config file names now; each is told they are paired (chat id and
        user id are the same in a private chat)."""
        owners = owners_of(allowed_users_now(self.settings), console=False)
        for user_id in sorted(owners):
            log.warning("owner_paired", user_id=user_id)
            with unless_fatal("telegram.paired_notice_not_sent", user_id=user_id):
                await self.outbox.send_text(user_id, escape(pairing_rules.PAIRED_TEXT))
        return owners

    async def reply(self, chat_id: int, text: str, markdown_chars: int = 0) -> None:
        """Send the owner a reply whose first ``markdown_chars`` characters are the model's
        Markdown (rendered as Telegram HTML) and the rest plain text, split as needed."""
        await self.outbox.send_text(chat_id, reply_html(text, markdown_chars))

    async def typing(self, chat_id: int) -> None:
        """Show the typing indicator."""
        await self.api.send_chat_action(chat_id, "typing")

    async def ask(self, ask: Any) -> None:
        """Send an approval card (keyboard included) for a RISKY call, a promotion, or a failed
        gate's repair offer ("Try to fix" / "Drop"), and remember it, so its outcome can be
        added to it later."""
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
        message_id = await self.outbox.send_approval(ask.chat_id, view, keyboard)
        self.store.cards.record(ask.turn_id, ask.chat_id, message_id, view.text, time.time())

    async def settle(self, settle: Any) -> None:
        """Show a decision's outcome on its card (``close`` says how), and answer the tap."""
        d = settle.decision
        await self.show_outcome(
            d.turn_id, d.chat_id, d.message_id, settle.outcome, final=settle.final
        )

    async def expire(self, expired: Any) -> None:
        """An approval or promotion expired untapped: its card says so, and the owner is told
        in a message of its own (an edit makes no sound)."""
        await self.show_outcome(expired.turn_id, expired.chat_id, 0, expired.outcome, tell=False)
        await self.outbox.send_text(expired.chat_id, escape(expired.notice))

    async def show_outcome(
        self,
        turn_id: str,
        chat_id: int,
        message_id: int,
        outcome: str,
        *,
        final: bool = True,
        tell: bool = True,
    ) -> None:
        """Add ``outcome`` to the card of ``turn_id`` and drop its keyboard. A card keeps its
        first final outcome: a later one (a stale second tap) goes as a message of its own, as
        does any outcome when the card cannot be edited (too old, deleted, never recorded)."""
        told = escape(outcome) if tell else None
        card = self.store.cards.get(turn_id)
        if card is None:
            if message_id:
                # A card sent before cards were recorded: keep its text, drop its keyboard.
                await self.outbox.close_card(chat_id, message_id, None, told)
            elif told is not None:
                await self.outbox.send_text(chat_id, told)
            return
        first = not card.outcome and (not final or self.store.cards.close(turn_id, outcome))
        if first:
            text = decided_card(card.text, outcome)
            await self.outbox.close_card(card.chat_id, card.message_id, text, told)
        elif told is not None:
            await self.outbox.send_text(card.chat_id, told)

    async def close(self) -> None:
        """Close the HTTP session and the store."""
        await self.api.close()
        if self._store is not None:
            self._store.close()
            self._store = None
