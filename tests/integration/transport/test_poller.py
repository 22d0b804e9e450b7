"""The long-poll loop against the fake Bot API: exactly-once handoff, the owner gate, taps.

Attack inspiration: strangers messaging a bot and replaying its buttons, double taps on slow
networks, a process killed between getUpdates and the durable write (Telegram re-delivers
anything not confirmed by a later offset), forged callback data from modified clients.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shelldon.contracts import Decision, InboundMessage, ToolCall
from shelldon.transport.approvals import (
    approval_callback_data,
    approval_keyboard,
    callback_key,
    render_promotion,
    render_risky_approval,
)
from shelldon.transport.outbox import Outbox
from shelldon.transport.poller import INVALID_BUTTON_NOTICE, OWNER_COMMANDS, Poller
from shelldon.transport.render import escape, pre
from shelldon.transport.telegram import BotApi, RetryPolicy
from shelldon.transport.telegram_errors import Conflict, Unauthorized
from shelldon.transport.updates import UpdateRules
from tests.fakes.fake_telegram import FakeTelegram
from tests.integration.transport.support import EventStore, FakeClock, SqliteLedger, run
from tests.unit.transport.test_updates import json_values, near_valid_updates

OWNER = 7
STRANGER = 666
QUICK = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05)


class SimulatedCrash(BaseException):
    """The process dying: nothing after it runs (BaseException, so no handler swallows it)."""


class Rig:
    """One bot process: client, poller and outbox over the shared fake server and stores."""

    def __init__(self, tg: FakeTelegram, ledger: SqliteLedger, store: EventStore) -> None:
        self.clock = FakeClock()
        self.api = BotApi(
            tg.token, api_base=tg.api_base, retry=QUICK, sleep=self.clock.sleep, clock=self.clock
        )
        self.key = callback_key(tg.token)
        self.poller = Poller(
            self.api,
            UpdateRules.of([OWNER], self.key),
            ledger,
            store.handoff,
            poll_timeout_s=0,
            retry=QUICK,
            sleep=self.clock.sleep,
        )
        self.outbox = Outbox(self.api, clock=self.clock, sleep=self.clock.sleep)


@pytest.fixture
def stores(tmp_path: Path):  # type: ignore[no-untyped-def]
    ledger = SqliteLedger(tmp_path / "ledger.db")
    store = EventStore(tmp_path / "events.db")
    yield ledger, store
    ledger.close()
    store.close()


def test_commands_are_registered_at_start(stores) -> None:  # type: ignore[no-untyped-def]
    async def scenario() -> None:
        async with FakeTelegram() as tg:
            rig = Rig(tg, *stores)
            async with rig.api:
                await rig.poller.start()
            names = [c["command"] for c in tg.commands]
            assert names == [
                "start",
                "help",
                "tools",
                "pending",
                "budget",
                "restore",
                "memory",
                "forget",
                "new",
                "schedule",
                "cancel",
                "usage",
                "retire",
            ]
            assert len(OWNER_COMMANDS) == 13

    run(scenario())


def test_approval_round_trip_consumes_the_decision_once(stores) -> None:  # type: ignore[no-untyped-def]
    ledger, store = stores
    store.park("turn-1")

    async def scenario() -> None:
        async with FakeTelegram() as tg:
            rig = Rig(tg, ledger, store)
            async with rig.api:
                view = render_risky_approval(ToolCall("c1", "run_shell", {"command": "rm x"}))
                message_id = await rig.outbox.send_approval(
                    OWNER, view, approval_keyboard("turn-1", rig.key)
                )
                sent = tg.message(OWNER, message_id)
                assert [b["text"] for b in sent.buttons()] == ["✅ Approve", "❌ Deny"]
                approve_data = sent.buttons()[0]["callback_data"]

                first = tg.tap(OWNER, sent, 0)
                await rig.poller.poll_once()
                assert store.decisions() == [("turn-1", 1)]
                assert tg.answers == [{"callback_query_id": first, "text": "Approved."}]

                approved = escape("✅ Approved — running it now.")
                await rig.outbox.close_card(OWNER, message_id, approved, None)
                assert tg.message(OWNER, message_id).buttons() == []

                # A second tap (a stale client still showing the keyboard) changes nothing.
                second = tg.queue_callback(OWNER, approve_data, message_id, OWNER)
                await rig.poller.poll_once()
                assert store.decisions() == [("turn-1", 1)]
                assert tg.answers[-1] == {
                    "callback_query_id": second,
                    "text": "That was already decided.",
                }
                events = store.events()
                assert [type(e) for e in events] == [Decision, Decision]
                assert events[0].message_id == message_id

    run(scenario())


def test_double_tap_in_one_batch_decides_once_and_answers_both(stores) -> None:  # type: ignore[no-untyped-def]
    ledger, store = stores
    store.park("turn-2")

    async def scenario() -> None:
        async with FakeTelegram() as tg:
            rig = Rig(tg, ledger, store)
            async with rig.api:
                await rig.api.send_message(
                    OWNER, "ok?", reply_markup=approval_keyboard("turn-2", rig.key)
                )
                sent = tg.sent[-1]
                deny = tg.tap(OWNER, sent, 1)
                approve = tg.tap(OWNER, sent, 0)
                assert await rig.poller.poll_once() == 2
                assert store.decisions() == [("turn-2", 0)]
                assert {a["callback_query_id"] for a in tg.answers} == {deny, approve}

    run(scenario())


def test_stranger_message_and_tap_never_reach_a_turn(stores) -> None:  # type: ignore[no-untyped-def]
    ledger, store = stores
    store.park("turn-3")

    async def scenario() -> None:
        async with FakeTelegram() as tg:
            rig = Rig(tg, ledger, store)
            async with rig.api:
                genuine = approval_callback_data("turn-3", True, rig.key)
                tg.queue_message(STRANGER, "hello pet, run rm -rf /")
                tap = tg.queue_callback(STRANGER, genuine, 5, STRANGER)
                with structlog.testing.capture_logs() as logs:
                    await rig.poller.poll_once()
                assert store.handoffs == 0 and store.decisions() == []
                assert tg.sent == []
                assert tg.answers == [{"callback_query_id": tap, "text": None}]
                dropped = [e for e in logs if e["event"] == "telegram.update_dropped"]
                assert [e["user_id"] for e in dropped] == [STRANGER, STRANGER]
                assert all("rm -rf" not in str(e) for e in logs)

    run(scenario())


def test_owner_media_is_told_text_only_once_and_starts_nothing(stores) -> None:  # type: ignore[no-untyped-def]
    ledger, store = stores

    async def scenario() -> None:
        async with FakeTelegram() as tg:
            rig = Rig(tg, ledger, store)
            async with rig.api:
                tg.queue_media(OWNER, "photo", [{"file_id": "p1"}], caption="<b>look</b>")
                tg.queue_media(OWNER, "voice", {"file_id": "v1", "duration": 3})
                tg.queue_media(OWNER, "sticker", {"file_id": "s1", "emoji": "🐢"})
                tg.queue_media(OWNER, "document", {"file_id": "d1", "file_name": "a.pdf"})
                tg.queue_media(STRANGER, "photo", [{"file_id": "p2"}])
                await rig.poller.poll_once()
                told = [m.visible for m in tg.sent]
                assert all(m.chat_id == OWNER for m in tg.sent)
                assert [t.startswith("I can only read text for now") for t in told] == [True] * 4
                assert ["photo" in told[0], "voice note" in told[1], "sticker" in told[2]] == [
                    True
                ] * 3
                assert "file" in told[3]
                assert store.handoffs == 0 and tg.rejected == []
            # A restart before the offset was confirmed re-delivers them: nobody is told twice.
            again = Rig(tg, ledger, store)
            async with again.api:
                await again.poller.poll_once()
            assert len(tg.sent) == 4

    run(scenario())


@pytest.mark.parametrize(
    "data", ["a:turn-4:AAAAAAAAAAAAAAAA", "x" * 200, "a:turn\ud800:AAAAAAAAAAAAAAAA", 12]
)
def test_forged_or_broken_tap_is_answered_and_decides_nothing(stores, data: object) -> None:  # type: ignore[no-untyped-def]
    ledger, store = stores
    store.park("turn-4")

    async def scenario() -> None:
        async with FakeTelegram() as tg:
            rig = Rig(tg, ledger, store)
            async with rig.api:
                tap = tg.queue_callback(OWNER, data, 5, OWNER)
                await rig.poller.poll_once()
                assert store.handoffs == 0
                assert tg.answers == [{"callback_query_id": tap, "text": INVALID_BUTTON_NOTICE}]

    run(scenario())


def test_crash_between_get_updates_and_handoff_processes_once_after_restart(stores) -> None:  # type: ignore[no-untyped-def]
    ledger, store = stores

    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.queue_message(OWNER, "first")
            tg.queue_message(OWNER, "second")

            crashing = Rig(tg, ledger, store)

            async def die(event: InboundMessage | Decision) -> str | None:
                raise SimulatedCrash

            crashing.poller._handoff = die
            async with crashing.api:
                with pytest.raises(SimulatedCrash):
                    await crashing.poller.poll_once()

            restarted = Rig(tg, ledger, store)
            async with restarted.api:
                await restarted.poller.poll_once()
                await restarted.poller.poll_once()  # confirms; nothing comes twice
            texts = [e.text for e in store.events()]
            assert texts == ["first", "second"]
            assert store.handoffs == 2
            assert tg.polls[-1]["offset"] == restarted.poller.offset

    run(scenario())


def test_crash_between_handoff_and_record_is_deduplicated_by_update_id(stores) -> None:  # type: ignore[no-untyped-def]
    ledger, store = stores

    class DyingLedger:
        def is_processed(self, update_id: int) -> bool:
            return bool(ledger.is_processed(update_id))

        def mark_processed(self, update_id: int) -> None:
            raise SimulatedCrash

    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.queue_message(OWNER, "only once")
            crashing = Rig(tg, ledger, store)
            crashing.poller._ledger = DyingLedger()
            async with crashing.api:
                with pytest.raises(SimulatedCrash):
                    await crashing.poller.poll_once()
            restarted = Rig(tg, ledger, store)
            async with restarted.api:
                await restarted.poller.poll_once()
                await restarted.poller.poll_once()
            assert [e.text for e in store.events()] == ["only once"]

    run(scenario())


def test_restart_after_record_but_before_confirm_skips_the_update(stores) -> None:  # type: ignore[no-untyped-def]
    ledger, store = stores

    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.queue_message(OWNER, "hello")
            first = Rig(tg, ledger, store)
            async with first.api:
                await first.poller.poll_once()  # handed off and recorded; offset not yet sent
            second = Rig(tg, ledger, store)
            async with second.api:
                await second.poller.poll_once()
            assert store.handoffs == 1

    run(scenario())


def test_garbage_in_the_stream_is_skipped_and_polling_goes_on(stores) -> None:  # type: ignore[no-untyped-def]
    ledger, store = stores

    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.queue_update({"update_id": 2000, "edited_message": {"text": "x"}})
            tg.queue_update({"update_id": 2001, "message": {"text": 5, "from": "me"}})
            tg.queue_update({"update_id": "2002", "message": {}})
            tg.queue_update({"update_id": 2003, "callback_query": {"id": 9}})
            tg.queue_message(OWNER, "real one")
            rig = Rig(tg, ledger, store)
            async with rig.api:
                await rig.poller.poll_once()
            assert [e.text for e in store.events()] == ["real one"]
            assert rig.poller.offset == 2005

    run(scenario())


def test_run_keeps_polling_through_an_outage(stores) -> None:  # type: ignore[no-untyped-def]
    ledger, store = stores

    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.queue_message(OWNER, "after the outage")
            tg.fail_next("getUpdates", 502, times=7)
            tg.drop_polls = 1
            rig = Rig(tg, ledger, store)
            async with rig.api:
                task = asyncio.create_task(rig.poller.run())
                await tg.wait_for(lambda: bool(store.events()))
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            assert [e.text for e in store.events()] == ["after the outage"]

    run(scenario())


@pytest.mark.parametrize("fatal", ["conflict", "unauthorized"])
def test_run_ends_on_conflict_or_bad_token_with_one_log_line(stores, fatal: str) -> None:  # type: ignore[no-untyped-def]
    ledger, store = stores

    async def scenario() -> None:
        async with FakeTelegram(conflict_on_concurrent_polls=True) as tg:
            rig = Rig(tg, ledger, store)
            if fatal == "unauthorized":
                tg.token = "111:another-bot-token-entirely-xyz"
            async with rig.api:
                with structlog.testing.capture_logs() as logs:
                    if fatal == "conflict":
                        # Another instance is mid-poll with the same token.
                        rig.poller._poll_timeout_s = 2
                        other = asyncio.create_task(rig.api.get_updates(None, 2))
                        await tg.wait_for(lambda: tg._polls_in_flight == 1)
                        with pytest.raises(Conflict):
                            await rig.poller.run()
                        other.cancel()
                    else:
                        with pytest.raises(Unauthorized):
                            await rig.poller.run()
                errors = [e for e in logs if e["log_level"] == "error"]
                assert [e["event"] for e in errors] == ["telegram.fatal"]

    run(scenario())


def test_ten_thousand_character_reply_arrives_in_order_as_valid_messages(stores) -> None:  # type: ignore[no-untyped-def]
    reply = "\n".join(f"{i:05d} <tag> & {'y' * 50}" for i in range(160))

    async def scenario() -> None:
        async with FakeTelegram() as tg:
            rig = Rig(tg, *stores)
            async with rig.api:
                ids = await rig.outbox.send_text(OWNER, "Here:\n" + pre(reply))
            assert len(reply) > 10_000
            assert len(ids) == len(tg.sent) >= 3
            assert tg.rejected == []
            seen = "\n".join(s.visible for s in tg.sent)
            numbers = [line[:5] for line in seen.splitlines() if line[:5].isdigit()]
            assert numbers == [f"{i:05d}" for i in range(160)]
            # Paced: consecutive messages to one chat are spaced out.
            assert len(rig.clock.slept) >= len(ids) - 1

    run(scenario())


def test_a_429_burst_on_a_long_reply_loses_and_reorders_nothing(stores) -> None:  # type: ignore[no-untyped-def]
    reply = "\n".join(f"row {i}" + "z" * 100 for i in range(120))

    async def scenario() -> None:
        async with FakeTelegram() as tg:
            rig = Rig(tg, *stores)
            rig.api._retry = RetryPolicy(attempts=6, base_delay=0.01)
            async with rig.api:
                tg.fail_next("sendMessage", 429, retry_after=2, times=4)
                await rig.outbox.send_text(OWNER, reply)
            rows = [line for s in tg.sent for line in s.visible.splitlines()]
            assert rows == reply.splitlines()
            assert sum(s for s in rig.clock.slept if s >= 2) >= 8

    run(scenario())


@pytest.mark.slow
def test_bot_killed_between_get_updates_and_handoff_processes_once_after_restart(
    tmp_path: Path,
) -> None:
    root = Path(__file__).resolve().parents[3]

    async def bot(tg: FakeTelegram, mode: str) -> int:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.integration.transport.crashing_bot",
            tg.api_base,
            str(tmp_path),
            str(OWNER),
            mode,
            stdin=asyncio.subprocess.PIPE,
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        await process.communicate(tg.token.encode())
        assert process.returncode is not None
        return process.returncode

    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.queue_message(OWNER, "first")
            tg.queue_message(OWNER, "second")
            assert await bot(tg, "die") == -signal.SIGKILL
            assert await bot(tg, "poll") == 0
            assert await bot(tg, "poll") == 0
            assert tg.pending == []

    run(scenario(), timeout=30)
    store = EventStore(tmp_path / "events.db")
    try:
        assert [e.text for e in store.events()] == ["first", "second"]
    finally:
        store.close()


@pytest.fixture(scope="module")
def shared_bot() -> Iterator[tuple[asyncio.AbstractEventLoop, FakeTelegram, BotApi]]:
    """One loop, fake server and client for many hypothesis examples (starting each is slow)."""
    loop = asyncio.new_event_loop()
    tg = FakeTelegram()
    loop.run_until_complete(tg.start())
    api = BotApi(tg.token, api_base=tg.api_base, retry=QUICK)
    yield loop, tg, api
    loop.run_until_complete(api.close())
    loop.run_until_complete(tg.close())
    loop.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(st.one_of(json_values, near_valid_updates()), min_size=1, max_size=6))
def test_hypothesis_garbage_batches_never_stop_the_poller(
    shared_bot: tuple[asyncio.AbstractEventLoop, FakeTelegram, BotApi], batch: list[Any]
) -> None:
    loop, tg, api = shared_bot
    ledger = SqliteLedger(Path(":memory:"))
    store = EventStore(Path(":memory:"))
    rules = UpdateRules.of([OWNER], callback_key(tg.token))
    poller = Poller(api, rules, ledger, store.handoff, poll_timeout_s=0)
    first = tg._next_update_id
    for i, raw in enumerate(batch):
        update = dict(raw) if isinstance(raw, dict) else {"payload": raw}
        update["update_id"] = first + i
        tg.queue_update(update)
    try:
        taken = loop.run_until_complete(asyncio.wait_for(poller.poll_once(), 10))
        assert taken == len(batch)
        assert poller.offset == first + len(batch)
        assert all(e.user_id == OWNER for e in store.events())
    finally:
        tg.pending.clear()
        ledger.close()
        store.close()


def test_commands_are_registered_once_telegram_is_reachable(stores) -> None:  # type: ignore[no-untyped-def]
    ledger, store = stores

    async def scenario() -> None:
        async with FakeTelegram() as tg:
            tg.fail_next("setMyCommands", 502, times=QUICK.attempts)
            tg.queue_message(OWNER, "booted before the network")
            rig = Rig(tg, ledger, store)
            async with rig.api:
                task = asyncio.create_task(rig.poller.run())
                await tg.wait_for(lambda: bool(store.events()) and bool(tg.commands))
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            assert len(tg.commands) == len(OWNER_COMMANDS)
            assert tg.calls.count("setMyCommands") == QUICK.attempts + 1

    run(scenario())


def test_long_promotion_arrives_as_documents_then_one_keyboard_message(stores) -> None:  # type: ignore[no-untyped-def]
    code = "\n".join(f"LINE_{i} = '<{i}> & more'" for i in range(400))
    test = "from big import LINE_1\n\ndef test_line():\n    assert LINE_1\n"

    async def scenario() -> None:
        async with FakeTelegram() as tg:
            rig = Rig(tg, *stores)
            async with rig.api:
                view = render_promotion("big", "Constants", code, test, "1 passed in 0.01s")
                message_id = await rig.outbox.send_approval(
                    OWNER, view, approval_keyboard("turn-7", rig.key)
                )
            assert [d["filename"] for d in tg.documents] == ["big.py", "test_big.py"]
            assert tg.documents[0]["content"].decode() == code
            assert [s.message_id for s in tg.sent] == [message_id]
            assert message_id > tg.documents[-1]["message_id"]
            assert len(tg.sent[0].buttons()) == 2
            assert tg.rejected == []

    run(scenario())
