"""Raw updates → InboundMessage / Decision / Rejected, and the owner gate.

Attack inspiration: strangers who find a bot's username and message it or replay its buttons;
bots in groups; hypothesis fuzzing of the Bot API's JSON shapes (missing fields, wrong types,
bools where ids go, unknown update kinds).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shelldon.contracts import Decision, InboundMessage
from shelldon.transport.approvals import approval_callback_data, callback_key
from shelldon.transport.updates import (
    PairingRequest,
    Rejected,
    UpdateRules,
    offset_past,
    parse_update,
    update_id_of,
)
from tests.fakes.fake_telegram import TEST_TOKEN

OWNER = 7
STRANGER = 666
KEY = callback_key(TEST_TOKEN)
RULES = UpdateRules.of([OWNER], KEY)


def message(
    user: int, text: Any = "hi", *, chat_type: str = "private", uid: Any = 5
) -> dict[str, Any]:
    return {
        "update_id": uid,
        "message": {
            "message_id": 1,
            "from": {"id": user, "is_bot": False},
            "chat": {"id": user, "type": chat_type},
            "text": text,
        },
    }


def tap(user: int, data: Any, *, uid: int = 6) -> dict[str, Any]:
    return {
        "update_id": uid,
        "callback_query": {
            "id": "q1",
            "from": {"id": user, "is_bot": False},
            "message": {"message_id": 9, "chat": {"id": user, "type": "private"}},
            "data": data,
        },
    }


def test_owner_message_becomes_an_inbound_message() -> None:
    assert parse_update(message(OWNER, "/help"), RULES) == InboundMessage(OWNER, OWNER, "/help", 5)


def test_stranger_message_is_rejected() -> None:
    result = parse_update(message(STRANGER), RULES)
    assert isinstance(result, Rejected)
    assert result.user_id == STRANGER and not result.from_owner
    assert "allowed_users" in result.reason


def test_with_no_owner_a_private_message_only_asks_for_pairing() -> None:
    unpaired = UpdateRules.of([], KEY)
    update = message(STRANGER, "sudo shelldon pair ABCD-EFGH")
    update["message"]["from"] |= {"first_name": "Ada\x1b[2J", "last_name": "L", "username": "ada"}
    assert parse_update(update, unpaired) == PairingRequest(
        5, STRANGER, STRANGER, "Ada[2J L", "ada"
    )
    # Nothing else gets past: a group, a channel, a bot, a tap.
    for chat_type in ("group", "supergroup", "channel"):
        assert isinstance(parse_update(message(STRANGER, chat_type=chat_type), unpaired), Rejected)
    bot = message(STRANGER)
    bot["message"]["from"]["is_bot"] = True
    assert isinstance(parse_update(bot, unpaired), Rejected)
    assert isinstance(parse_update(tap(STRANGER, "a:t1:00"), unpaired), Rejected)


def test_owner_message_in_a_group_is_rejected() -> None:
    assert isinstance(parse_update(message(OWNER, chat_type="group"), RULES), Rejected)


def test_message_from_a_bot_is_rejected() -> None:
    update = message(OWNER)
    update["message"]["from"]["is_bot"] = True
    assert isinstance(parse_update(update, RULES), Rejected)


def test_owner_photo_without_text_is_rejected_as_from_the_owner() -> None:
    result = parse_update(message(OWNER, None), RULES)
    assert isinstance(result, Rejected) and result.from_owner


@pytest.mark.parametrize(
    ("field", "word"),
    [
        ("photo", "photo"),
        ("voice", "voice note"),
        ("sticker", "sticker"),
        ("document", "file"),
        ("animation", "GIF"),
        ("video_note", "video message"),
    ],
)
def test_owner_media_is_answered_with_text_only_for_now(field: str, word: str) -> None:
    update = message(OWNER, None)
    del update["message"]["text"]
    update["message"][field] = {"file_id": "x"}
    if field == "animation":
        update["message"]["document"] = {"file_id": "x"}
    result = parse_update(update, RULES)
    assert isinstance(result, Rejected) and result.chat_id == OWNER
    assert result.notice.startswith("I can only read text for now") and word in result.notice


def test_a_strangers_photo_and_a_service_message_get_no_notice() -> None:
    update = message(STRANGER, None)
    update["message"]["photo"] = [{"file_id": "x"}]
    assert isinstance(result := parse_update(update, RULES), Rejected) and not result.notice
    pinned = message(OWNER, None)
    pinned["message"]["pinned_message"] = {"message_id": 3}
    assert isinstance(result := parse_update(pinned, RULES), Rejected) and not result.notice


def test_owner_tap_becomes_a_decision() -> None:
    result = parse_update(tap(OWNER, approval_callback_data("turn-9", False, KEY)), RULES)
    assert result == Decision(OWNER, OWNER, "turn-9", False, 6, "q1", 9)


def test_stranger_tap_on_a_genuine_button_is_rejected_but_answerable() -> None:
    result = parse_update(tap(STRANGER, approval_callback_data("turn-9", True, KEY)), RULES)
    assert isinstance(result, Rejected)
    assert result.callback_id == "q1" and not result.from_owner


def test_owner_tap_with_forged_data_is_rejected_but_answerable() -> None:
    result = parse_update(tap(OWNER, "a:turn-9:AAAAAAAAAAAAAAAA"), RULES)
    assert isinstance(result, Rejected)
    assert result.callback_id == "q1" and result.from_owner


def test_bool_is_not_an_id() -> None:
    assert isinstance(parse_update(message(True), UpdateRules.of([1], KEY)), Rejected)
    assert update_id_of(message(OWNER, uid=True)) is None


def test_an_update_id_is_usable_only_where_sqlite_can_store_it() -> None:
    assert update_id_of(message(OWNER, uid=2**63 - 1)) == 2**63 - 1
    assert update_id_of(message(OWNER, uid=0)) == 0
    for bad in (2**63, 2**64, -1, -(2**63) - 1, 1.0, "5", None):
        assert update_id_of(message(OWNER, uid=bad)) is None
        assert isinstance(parse_update(message(OWNER, uid=bad), RULES), Rejected)


def test_ids_past_64_bits_are_not_ids() -> None:
    # A sender or chat id that cannot be stored or sent back is no owner.
    huge = message(OWNER)
    huge["message"]["from"]["id"] = 2**64 + OWNER
    assert isinstance(parse_update(huge, UpdateRules.of([2**64 + OWNER], KEY)), Rejected)


def test_offset_past_confirms_a_dropped_update() -> None:
    assert offset_past(None, message(OWNER, uid=2**64)) == 2**64 + 1
    assert offset_past(1005, message(OWNER, uid=2**64)) == 2**64 + 1
    assert offset_past(None, message(OWNER, uid="12")) == 0
    assert offset_past(1005, message(OWNER, uid=-7)) == 1005
    assert offset_past(1005, message(OWNER, uid=True)) == 1005
    assert offset_past(None, "not an update") == 0


def test_unknown_update_kind_is_rejected_with_its_id() -> None:
    result = parse_update({"update_id": 3, "edited_message": {}, 7: "x"}, RULES)
    assert isinstance(result, Rejected) and result.update_id == 3


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=20,
)
ids = st.one_of(st.integers(), st.just(OWNER), st.booleans(), st.text(max_size=5), st.none())


@st.composite
def near_valid_updates(draw: st.DrawFn) -> Any:
    """Updates shaped like Telegram's with any field missing, mistyped or replaced."""
    base = draw(
        st.sampled_from(
            [
                message(OWNER),
                tap(OWNER, approval_callback_data("t1", True, KEY)),
                message(STRANGER),
            ]
        )
    )

    def mutate(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                choice = draw(st.integers(0, 9))
                if choice == 0:
                    continue
                if choice == 1:
                    out[key] = draw(json_values)
                elif choice == 2:
                    out[key] = draw(ids)
                else:
                    out[key] = mutate(value)
            return out
        return node

    return mutate(base)


@settings(max_examples=150, deadline=None)
@given(st.one_of(json_values, near_valid_updates()))
def test_garbage_updates_never_raise(raw: Any) -> None:
    result = parse_update(raw, RULES)
    assert isinstance(result, InboundMessage | Decision | Rejected)
    if isinstance(result, InboundMessage | Decision):
        assert result.user_id == OWNER


@given(st.one_of(json_values, near_valid_updates()))
def test_with_no_owner_no_update_ever_reaches_the_inbox(raw: Any) -> None:
    result = parse_update(raw, UpdateRules.of([], KEY))
    assert isinstance(result, PairingRequest | Rejected)
    if isinstance(result, PairingRequest):
        assert all(c.isprintable() for c in result.name + result.username)
