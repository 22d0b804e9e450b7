"""Raw Telegram updates → ``InboundMessage``, ``Decision``, ``WantedPhoto`` (an owner's image,
to fetch before the handoff, where the model sees) or a ``Rejected`` value.

``parse_update`` never raises: malformed JSON shapes, unknown update kinds, missing fields and
wrong types all become ``Rejected(reason)``. The owner gate is applied here first: a message or
a tap from anyone who is not an owner (``shelldon.rules.commands.owners_of``), or from a group
chat, where replies would be seen by others, is rejected before it can reach the inbox. While
there is no owner at all, a private message is a ``PairingRequest`` instead (it is answered
with a pairing code, ``shelldon.rules.pairing``, and still reaches nothing else).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from shelldon.contracts import Decision, InboundMessage
from shelldon.rules.commands import owners_of
from shelldon.rules.pairing import clean_name
from shelldon.transport.approvals import InvalidCallback, parse_callback_data
from shelldon.transport.photos import PhotoCaps, WantedPhoto, wanted_photo


@dataclass(frozen=True, slots=True)
class UpdateRules:
    """Who may talk to the pet, and the key that authenticates its approval buttons."""

    owners: frozenset[int]
    callback_key: bytes = field(repr=False)  # derived from the bot token: never in a log line
    photos: PhotoCaps | None = None  # None: the model takes no images (the text-only reply)

    @classmethod
    def of(
        cls, allowed_users: Iterable[int], callback_key: bytes, photos: PhotoCaps | None = None
    ) -> UpdateRules:
        """Rules from the configured ``allowed_users`` (and photo caps, where the model sees)."""
        return cls(owners_of(allowed_users, console=False), callback_key, photos)


@dataclass(frozen=True, slots=True)
class Rejected:
    """An update that starts nothing. ``callback_id`` is set for taps (they still get an
    answer, to stop the spinner); ``from_owner`` says whether the sender passed the gate;
    ``notice`` is what the owner is told in chat ``chat_id`` (a voice note: text only)."""

    reason: str
    update_id: int | None = None
    user_id: int | None = None
    callback_id: str = ""
    from_owner: bool = False
    chat_id: int = 0
    notice: str = ""


UNREADABLE: tuple[tuple[str, str], ...] = (
    ("photo", "photo"),
    ("voice", "voice note"),
    ("video_note", "video message"),
    ("sticker", "sticker"),
    ("animation", "GIF"),  # before "document": an animation carries one too
    ("document", "file"),
    ("video", "video"),
    ("audio", "audio file"),
    ("venue", "place"),
    ("location", "location"),
    ("contact", "contact"),
    ("poll", "poll"),
    ("dice", "dice"),
    ("story", "story"),
)
"""Message contents the pet cannot read yet, by Bot API field, with the owner's word for each
(a service message, such as a pin, holds none of them and needs no answer)."""

TEXT_ONLY = "I can only read text for now, so I can't take in that {}. Tell me in words?"
"""What the owner is told when they send something that is not text."""


@dataclass(frozen=True, slots=True)
class PairingRequest:
    """A private message while the pet has no owner: its sender may be the owner-to-be, who
    is sent a pairing code. Its text is never read (a code typed here pairs nobody)."""

    update_id: int
    user_id: int
    chat_id: int
    name: str = ""
    username: str = ""


Parsed = InboundMessage | Decision | Rejected | PairingRequest | WantedPhoto


# What sqlite's INTEGER (and msgpack's signed ints) can hold: every id the pet stores or
# forwards must fit, whatever a broken or hostile server sends.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _int(value: Any) -> int | None:
    # bool is an int in Python, never an id in Telegram.
    return value if type(value) is int and INT64_MIN <= value <= INT64_MAX else None


def _dict(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def update_id_of(raw: object) -> int | None:
    """The update's ``update_id``, or None when the update has no usable one (not an int, or
    outside 0..2**63-1, which sqlite could not store)."""
    update = _dict(raw)
    if update is None:
        return None
    update_id = _int(update.get("update_id"))
    return update_id if update_id is not None and update_id >= 0 else None


def offset_past(offset: int | None, raw: object) -> int:
    """The next getUpdates offset once ``raw``, an update without a usable id, is dropped:
    Telegram confirms every id below the offset, so one past an int id however large; anything
    else (a negative or non-int id, none at all) already sits below it: it stays (at least 0)."""
    update = _dict(raw)
    raw_id = update.get("update_id") if update is not None else None
    floor = 0 if offset is None else offset
    if type(raw_id) is int and raw_id >= floor:
        return raw_id + 1
    return floor


def _sender(holder: dict[str, Any]) -> int | None:
    user = _dict(holder.get("from"))
    if user is None or user.get("is_bot") is True:
        return None
    return _int(user.get("id"))


def _private_chat(message: dict[str, Any]) -> int | None:
    chat = _dict(message.get("chat"))
    if chat is None or chat.get("type") != "private":
        return None
    return _int(chat.get("id"))


def _parse_message(update_id: int, message: dict[str, Any], rules: UpdateRules) -> Parsed:
    user_id = _sender(message)
    if user_id is None:
        return Rejected("message without a human sender", update_id)
    if not rules.owners:
        return _pairing_request(update_id, message, user_id)
    if user_id not in rules.owners:
        return Rejected("sender is not in allowed_users", update_id, user_id)
    chat_id = _private_chat(message)
    if chat_id is None:
        return Rejected("owner message outside a private chat", update_id, user_id)
    text = message.get("text")
    if not isinstance(text, str) and rules.photos is not None:
        wanted = wanted_photo(message, rules.photos, chat_id, user_id, update_id)
        if wanted is not None:
            return wanted
    if not isinstance(text, str) or not text.strip():
        kind = "" if isinstance(text, str) else next((w for k, w in UNREADABLE if k in message), "")
        notice = TEXT_ONLY.format(kind) if kind else ""
        reason = f"message has no text ({kind})" if kind else "message has no text"
        return Rejected(reason, update_id, user_id, from_owner=True, chat_id=chat_id, notice=notice)
    # JSON may carry lone surrogates ("\udcff"): not text, and not storable as UTF-8.
    text = text.encode("utf-8", "replace").decode("utf-8")
    return InboundMessage(chat_id=chat_id, user_id=user_id, text=text, update_id=update_id)


def _pairing_request(update_id: int, message: dict[str, Any], user_id: int) -> Parsed:
    chat_id = _private_chat(message)
    if chat_id is None:
        return Rejected("no owner yet, and not a private chat", update_id, user_id)
    user = _dict(message.get("from")) or {}
    name = clean_name(f"{clean_name(user.get('first_name'))} {clean_name(user.get('last_name'))}")
    return PairingRequest(update_id, user_id, chat_id, name, clean_name(user.get("username")))


def _parse_callback(update_id: int, query: dict[str, Any], rules: UpdateRules) -> Parsed:
    callback_id = query.get("id")
    if not isinstance(callback_id, str) or not callback_id:
        return Rejected("callback query without an id", update_id)
    user_id = _sender(query)
    if user_id is None:
        return Rejected("callback without a human sender", update_id, callback_id=callback_id)
    if user_id not in rules.owners:
        return Rejected(
            "sender is not in allowed_users", update_id, user_id, callback_id=callback_id
        )
    message = _dict(query.get("message"))
    chat_id = _private_chat(message) if message is not None else None
    message_id = _int(message.get("message_id")) if message is not None else None
    if chat_id is None or message_id is None:
        return Rejected(
            "tap on a message outside a private chat",
            update_id,
            user_id,
            callback_id=callback_id,
            from_owner=True,
        )
    choice = parse_callback_data(query.get("data"), rules.callback_key)
    if isinstance(choice, InvalidCallback):
        return Rejected(choice.reason, update_id, user_id, callback_id=callback_id, from_owner=True)
    return Decision(
        chat_id=chat_id,
        user_id=user_id,
        turn_id=choice.turn_id,
        approved=choice.approved,
        update_id=update_id,
        callback_id=callback_id,
        message_id=message_id,
    )


def parse_update(raw: object, rules: UpdateRules) -> Parsed:
    """What a raw update means for the pet; never raises."""
    update = _dict(raw)
    if update is None:
        return Rejected(f"update is {type(raw).__name__}, not an object")
    update_id = update_id_of(update)
    if update_id is None:
        return Rejected("update has no valid update_id")
    message = _dict(update.get("message"))
    if message is not None:
        return _parse_message(update_id, message, rules)
    query = _dict(update.get("callback_query"))
    if query is not None:
        return _parse_callback(update_id, query, rules)
    kinds = sorted(str(k)[:32] for k in update if k != "update_id")
    return Rejected(f"unsupported update kind {kinds[:3]!r}", update_id)
