"""An approval card over the real Bot API client and the fake server: nothing is cut or hidden.

The card for a long ``write_file`` travels as a document (sendDocument, multipart, bytes
exactly as the tool would write them) followed by the message with the keyboard, whose text
names the hidden characters and spells out a homoglyph host.

Attack inspiration: Trojan Source (CVE-2021-42574) in file content past a preview, IDN
homoglyph hosts in URLs.
"""

from __future__ import annotations

from shelldon.contracts import ToolCall
from shelldon.transport.approvals import (
    approval_keyboard,
    callback_key,
    decided_card,
    render_risky_approval,
)
from shelldon.transport.outbox import Outbox
from shelldon.transport.render import escape
from shelldon.transport.telegram import BotApi, RetryPolicy
from tests.fakes.fake_telegram import FakeTelegram
from tests.integration.transport.support import FakeClock, run

OWNER = 7


def test_a_long_write_file_card_sends_the_whole_content_then_the_warnings_and_keyboard() -> None:
    content = "".join(f"print({i})  # <&>\n" for i in range(1500)) + "x = 1\u202e\n"
    url = "https://g\u043e\u043egle.com/upload"
    call = ToolCall("c1", "write_file", {"path": "upload.py", "content": content, "note": url})

    async def scenario() -> None:
        clock = FakeClock()
        async with FakeTelegram() as tg:
            api = BotApi(tg.token, api_base=tg.api_base, retry=RetryPolicy(attempts=1),
                         sleep=clock.sleep, clock=clock)  # fmt: skip
            async with api:
                outbox = Outbox(api, clock=clock, sleep=clock.sleep)
                view = render_risky_approval(call, "save the uploader")
                keyboard = approval_keyboard("turn-1", callback_key(tg.token))
                message_id = await outbox.send_approval(OWNER, view, keyboard)
            (document,) = tg.documents
            assert document["filename"] == "content.txt"
            assert document["content"] == content.encode()  # whole, byte for byte
            assert document["message_id"] < message_id  # the file arrives before the question
            card = tg.message(OWNER, message_id)
            assert [b["text"] for b in card.buttons()] == ["✅ Approve", "❌ Deny"]
            assert "\u202e" not in card.visible
            assert "U+202E RIGHT-TO-LEFT OVERRIDE (line 1501, column 6)" in card.visible
            assert "it is xn--ggle-55da.com" in card.visible
            assert f"first 600 of {len(content)} characters" in card.visible

    run(scenario())


def _decide(prepare: str, outcome: str) -> tuple[FakeTelegram, int, str]:
    """Send a card, let the fake ``prepare`` it ("", "age", "delete"), then close it."""
    call = ToolCall("c1", "run_shell", {"command": "make <all>"})
    result: list[tuple[FakeTelegram, int, str]] = []

    async def scenario() -> None:
        clock = FakeClock()
        async with FakeTelegram() as tg:
            api = BotApi(tg.token, api_base=tg.api_base, retry=RetryPolicy(attempts=1),
                         sleep=clock.sleep, clock=clock)  # fmt: skip
            async with api:
                outbox = Outbox(api, clock=clock, sleep=clock.sleep)
                view = render_risky_approval(call)
                keyboard = approval_keyboard("turn-1", callback_key(tg.token))
                message_id = await outbox.send_approval(OWNER, view, keyboard)
                if prepare:
                    getattr(tg, prepare)(OWNER, message_id)
                text = decided_card(view.text, outcome)
                await outbox.close_card(OWNER, message_id, text, escape(outcome))
            result.append((tg, message_id, view.text))

    run(scenario())
    return result[0]


def test_a_decided_card_is_edited_in_place_and_nothing_else_is_sent() -> None:
    tg, message_id, _ = _decide("", "✅ Approved — running it now.")
    card = tg.message(OWNER, message_id)
    assert "make <all>" in card.visible and card.visible.endswith("✅ Approved — running it now.")
    assert not card.buttons() and len(tg.sent) == 1


def test_a_card_too_old_to_edit_gets_its_outcome_as_a_new_message() -> None:
    tg, message_id, _ = _decide("age", "❌ Denied — I won't run it.")
    assert [m.visible for m in tg.sent[1:]] == ["❌ Denied — I won't run it."]
    assert tg.message(OWNER, message_id).buttons()  # Telegram kept them: nothing to do there
    assert ("editMessageText", "Bad Request: message can't be edited") in tg.rejected


def test_an_outcome_that_does_not_fit_the_card_drops_the_keyboard_and_comes_on_its_own() -> None:
    outcome = "Could not add the tool: " + "why " * 1000
    tg, message_id, text = _decide("", outcome)
    card = tg.message(OWNER, message_id)
    assert card.text == text and not card.buttons()  # what was asked, untouched
    assert tg.calls.count("editMessageReplyMarkup") == 1
    assert [m.visible for m in tg.sent[1:]] == [outcome]
