"""Pairing codes over the real Bot API client and the fake server: what a would-be owner and a
flood of strangers get from ``TelegramLink.offer_code`` while the pet has no owner.

Attack inspiration: a stranger who keeps messaging, many strangers at once (OpenClaw caps its
pending pairing requests for the same reason), a send that fails after the code was made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shelldon.config import load_settings
from shelldon.rules import pairing as rules
from shelldon.transport.telegram_errors import TelegramError
from shelldon.transport.telegram_link import TelegramLink
from shelldon.transport.updates import PairingRequest
from tests.fakes.fake_telegram import FakeTelegram
from tests.integration.transport.support import run

T0 = 1_800_000_000.0


class Quiet:
    def notify(self, tag: Any, value: Any = None) -> None:
        pass


def request(user_id: int) -> PairingRequest:
    return PairingRequest(update_id=user_id, user_id=user_id, chat_id=user_id, name="Ada")


def link_for(tg: FakeTelegram, home: Path) -> TelegramLink:
    env = {"SHELLDON_HOME": str(home), "SHELLDON_TELEGRAM_API_BASE": tg.api_base}
    return TelegramLink(load_settings(environ=env), tg.token, Quiet())


def texts(tg: FakeTelegram, chat: int) -> list[str]:
    return [m.visible for m in tg.sent if m.chat_id == chat]


def test_a_repeat_is_reminded_once_a_minute_and_a_flood_gets_the_hourly_cap(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg:
            link = link_for(tg, tmp_path)
            try:
                for at in (T0, T0 + 10, T0 + 61, T0 + 70):
                    link.clock = lambda at=at: at
                    await link.offer_code(request(1))
                first, reminder = texts(tg, 1)
                assert "sudo shelldon pair" in first
                assert "I sent you a pairing code at" in reminder
                code = first.split("sudo shelldon pair ", 1)[1].split()[0]
                assert len(code) == 9 and code not in reminder  # the code is not kept
                link.clock = lambda: T0 + 80
                for user in range(2, 2 + rules.MAX_CODES_PER_HOUR):
                    await link.offer_code(request(user))
                got = [u for u in range(2, 2 + rules.MAX_CODES_PER_HOUR) if texts(tg, u)]
                assert len(got) == rules.MAX_CODES_PER_HOUR - 1  # user 1 holds one already
                assert len(tg.sent) == rules.MAX_CODES_PER_HOUR + 1  # codes, one reminder
                issued = [e for e in link.store.audit.log() if e.action == "pairing_code_issued"]
                assert len(issued) == rules.MAX_CODES_PER_HOUR
                # An hour on, the window has moved: a new stranger gets a code again.
                link.clock = lambda: T0 + 3700
                await link.offer_code(request(99))
                assert texts(tg, 99)
            finally:
                await link.close()

    run(scenario())


def test_a_code_that_could_not_be_sent_is_withdrawn_so_its_person_can_ask_again(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg:
            link = link_for(tg, tmp_path)
            link.clock = lambda: T0
            try:
                tg.fail_next("sendMessage", 400, "Bad Request: chat not found")
                with pytest.raises(TelegramError):
                    await link.offer_code(request(5))
                assert link.store.pairing.outstanding(5, T0 + 1) is None
                await link.offer_code(request(5))
                assert len(texts(tg, 5)) == 1 and "sudo shelldon pair" in texts(tg, 5)[0]
                code = tg.sent[-1]
                assert "<code>sudo shelldon pair " in code.text  # one tap copies it
            finally:
                await link.close()

    run(scenario())
