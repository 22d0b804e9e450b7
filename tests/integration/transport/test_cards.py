"""An approval card over the real Bot API client and the fake server: nothing is cut or hidden.

The card for a long ``write_file`` travels as a document (sendDocument, multipart, bytes
exactly as the tool would write them) followed by the message with the keyboard, whose text
names the hidden characters and spells out a homoglyph host.

Attack inspiration: Trojan Source (CVE-2021-42574) in file content past a preview, IDN
homoglyph hosts in URLs.
"""

from __future__ import annotations

from shelldon.contracts import ToolCall
from shelldon.transport.approvals import approval_keyboard, callback_key, render_risky_approval
from shelldon.transport.outbox import Outbox
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
