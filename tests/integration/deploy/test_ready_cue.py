"""The poller's READY cue (``on_polling``): once, after the first command registration attempt —
also when Telegram is failing then, so a Pi that boots without network still comes up — and
never when the token is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from shelldon.rules.commands import OWNER_COMMANDS
from shelldon.transport.poller import Poller
from shelldon.transport.telegram import BotApi, RetryPolicy
from shelldon.transport.telegram_errors import Unauthorized
from shelldon.transport.updates import UpdateRules
from tests.fakes.fake_telegram import FakeTelegram
from tests.integration.transport.support import EventStore, FakeClock, SqliteLedger, run

QUICK = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02)


async def poll_for_a_while(tg: FakeTelegram, tmp_path: Path, cues: list[int]) -> None:
    clock = FakeClock()
    api = BotApi(tg.token, api_base=tg.api_base, retry=QUICK, sleep=clock.sleep, clock=clock)
    ledger = SqliteLedger(tmp_path / "ledger.db")
    store = EventStore(tmp_path / "events.db")
    poller = Poller(
        api,
        UpdateRules.of([7], b"k" * 32),
        ledger,
        store.handoff,
        poll_timeout_s=0,
        retry=QUICK,
        sleep=clock.sleep,
        on_polling=lambda: cues.append(len(tg.commands)),
    )
    try:
        async with api:
            task = asyncio.create_task(poller.run())
            await asyncio.sleep(0.5)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            error = None if task.cancelled() else task.exception()
            if error is not None:
                raise error
    finally:
        ledger.close()
        store.close()


def test_the_cue_comes_once_after_commands_are_registered(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        cues: list[int] = []
        async with FakeTelegram() as tg:
            await poll_for_a_while(tg, tmp_path, cues)
        return cues

    # Once, with every owner command already registered.
    assert run(scenario()) == [len(OWNER_COMMANDS)]


def test_the_cue_comes_even_while_telegram_is_down(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        cues: list[int] = []
        async with FakeTelegram() as tg:
            tg.fail_next("setMyCommands", 502, times=50)
            await poll_for_a_while(tg, tmp_path, cues)
        return cues

    assert run(scenario()) == [0]  # up and polling; commands follow once Telegram answers


def test_a_refused_token_never_gives_the_cue(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        cues: list[int] = []
        async with FakeTelegram() as tg:
            tg.fail_next("setMyCommands", 401, "Unauthorized", times=5)
            with pytest.raises(Unauthorized):
                await poll_for_a_while(tg, tmp_path, cues)
        return cues

    assert run(scenario()) == []
