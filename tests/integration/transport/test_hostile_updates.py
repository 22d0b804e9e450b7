"""Updates a broken or hostile Bot API can send, through the real poller and the fake Bot API:
each one that cannot be stored is logged, dropped and confirmed; the pet goes on.

Attack inspiration: Telegram's own note that update ids fit in 32 bits only "in practice"
(nothing on the wire enforces it), sqlite's INTEGER range (a Python int past 2**63-1 raises
OverflowError at bind time), JSON's unbounded numbers (RFC 8259 section 6), and the
crash-loop pattern of a consumer that never acknowledges a poison message (a restart fetches
it again and dies again).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from shelldon.store import Store
from shelldon.transport.approvals import callback_key
from shelldon.transport.poller import Poller
from shelldon.transport.telegram import BotApi
from shelldon.transport.updates import INT64_MAX, UpdateRules
from tests.fakes.fake_telegram import FakeTelegram
from tests.integration.transport.support import EventStore, FakeClock, SqliteLedger, run
from tests.integration.transport.test_poller import OWNER, QUICK

INT64_MIN = -(2**63)


def _message(update_id: Any, text: str) -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": 1,
            "date": 0,
            "from": {"id": OWNER, "is_bot": False, "first_name": "owner"},
            "chat": {"id": OWNER, "type": "private"},
            "text": text,
        },
    }


class Pet:
    """The real poller over a fake Bot API, a sqlite ledger and a durable event store."""

    def __init__(self, tg: FakeTelegram, ledger: Any, store: EventStore) -> None:
        clock = FakeClock()
        self.api = BotApi(tg.token, api_base=tg.api_base, retry=QUICK, sleep=clock.sleep)
        self.poller = Poller(
            self.api,
            UpdateRules.of([OWNER], callback_key(tg.token)),
            ledger,
            store.handoff,
            poll_timeout_s=0,
            retry=QUICK,
            sleep=clock.sleep,
        )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EventStore]:
    events = EventStore(tmp_path / "events.db")
    yield events
    events.close()


@pytest.fixture(params=["test-ledger", "history-store"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """The ledger the transport tests use, and the service's own store."""
    if request.param == "history-store":
        with Store(tmp_path / "shelldon.db") as history:
            yield history.inbox
        return
    test_ledger = SqliteLedger(tmp_path / "ledger.db")
    yield test_ledger
    test_ledger.close()


def _texts(store: EventStore) -> list[str]:
    return [event.text for event in store.events()]


OUT_OF_RANGE = [INT64_MAX + 1, 2**64, 10**30, -1, INT64_MIN - 1]


@pytest.mark.parametrize("bad_id", OUT_OF_RANGE, ids=["2**63", "2**64", "10**30", "-1", "-2**63-1"])
def test_an_update_id_sqlite_cannot_store_is_dropped_and_confirmed(
    ledger: Any, store: EventStore, bad_id: int
) -> None:
    async def scenario() -> list[dict[str, Any]]:
        async with FakeTelegram() as tg:
            tg.queue_update(_message(1000, "before"))
            tg.queue_update(_message(bad_id, "poison"))
            pet = Pet(tg, ledger, store)
            async with pet.api:
                with structlog.testing.capture_logs() as logs:
                    await pet.poller.poll_once()
                    await pet.poller.poll_once()  # confirms what the first poll took
                assert tg.pending == []  # confirmed: never delivered again
                assert tg.polls[-1]["offset"] == max(1001, bad_id + 1)
        return logs

    logs = run(scenario())
    assert _texts(store) == ["before"]
    dropped = [e for e in logs if e["event"] == "telegram.update_without_id_dropped"]
    assert len(dropped) == 1
    assert "poison" not in repr(logs)


def test_the_largest_id_sqlite_can_store_is_handed_off(ledger: Any, store: EventStore) -> None:
    async def scenario() -> int | None:
        async with FakeTelegram() as tg:
            tg.queue_update(_message(INT64_MAX, "at the edge"))
            pet = Pet(tg, ledger, store)
            async with pet.api:
                await pet.poller.poll_once()
                await pet.poller.poll_once()
                assert tg.pending == []
                return pet.poller.offset

    assert run(scenario()) == INT64_MAX + 1
    assert _texts(store) == ["at the edge"]
    assert ledger.is_processed(INT64_MAX)


MALFORMED_IDS = ["1000", 1000.0, None, True, [1000], {"id": 1}, "9" * 5000]


def test_malformed_ids_alone_are_confirmed_so_they_are_not_polled_forever(
    ledger: Any, store: EventStore
) -> None:
    async def scenario() -> tuple[list[int | None], int]:
        async with FakeTelegram() as tg:
            for bad in MALFORMED_IDS:
                tg.queue_update(_message(bad, "poison"))
            tg.queue_update({"message": {"text": "no id at all"}, "update_id": None})
            pet = Pet(tg, ledger, store)
            async with pet.api:
                with structlog.testing.capture_logs() as logs:
                    first = await pet.poller.poll_once()
                    second = await pet.poller.poll_once()
                assert first == len(MALFORMED_IDS) + 1 and second == 0
                assert tg.pending == []
                dropped = [e for e in logs if e["event"] == "telegram.update_without_id_dropped"]
                return [p["offset"] for p in tg.polls], len(dropped)

    offsets, dropped = run(scenario())
    assert offsets == [None, 0]
    assert dropped == len(MALFORMED_IDS) + 1
    assert _texts(store) == []


class FlakyLedger:
    """A ledger whose disk fails for one update id (sqlite raising, as a full disk does)."""

    def __init__(self, inner: Any, broken_id: int) -> None:
        self.inner = inner
        self.broken_id = broken_id

    def is_processed(self, update_id: int) -> bool:
        if update_id == self.broken_id:
            raise sqlite3.OperationalError("disk I/O error")
        return bool(self.inner.is_processed(update_id))

    def mark_processed(self, update_id: int) -> None:
        self.inner.mark_processed(update_id)


def test_a_storage_error_drops_that_update_and_the_service_polls_on(
    ledger: Any, store: EventStore
) -> None:
    async def scenario() -> list[dict[str, Any]]:
        async with FakeTelegram() as tg:
            tg.queue_update(_message(1000, "one"))
            tg.queue_update(_message(1001, "cannot be stored"))
            tg.queue_update(_message(1002, "three"))
            pet = Pet(tg, FlakyLedger(ledger, 1001), store)
            async with pet.api:
                with structlog.testing.capture_logs() as logs:
                    task = asyncio.create_task(pet.poller.run())
                    await tg.wait_for(lambda: len(store.events()) == 2 and not tg.pending)
                    tg.queue_update(_message(1003, "after"))
                    await tg.wait_for(lambda: len(store.events()) == 3 and not tg.pending)
                    assert not task.done()  # the run loop survived
                    task.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await task
        return logs

    logs = run(scenario())
    assert _texts(store) == ["one", "three", "after"]
    failed = [e for e in logs if e["event"] == "telegram.update_not_stored"]
    assert [e["update_id"] for e in failed] == [1001]


def test_a_handoff_that_raises_drops_the_tap_but_still_answers_it(
    ledger: Any, store: EventStore
) -> None:
    async def broken(event: Any) -> str | None:
        raise sqlite3.DatabaseError("database disk image is malformed")

    async def scenario() -> tuple[list[dict[str, Any]], list[str]]:
        async with FakeTelegram() as tg:
            sent = await _approval_message(tg)
            tap = tg.tap(OWNER, sent, 0)
            pet = Pet(tg, ledger, store)
            pet.poller._handoff = broken
            async with pet.api:
                await pet.poller.poll_once()
                await pet.poller.poll_once()
                assert tg.pending == []
            return tg.answers, [tap]

    answers, taps = run(scenario())
    assert [a["callback_query_id"] for a in answers] == taps


async def _approval_message(tg: FakeTelegram) -> Any:
    """A message with an approval keyboard, as the pet would have sent it."""
    from shelldon.transport.approvals import approval_keyboard

    async with BotApi(tg.token, api_base=tg.api_base) as api:
        keyboard = approval_keyboard("turn-1", callback_key(tg.token))
        message_id = await api.send_message(OWNER, "Run it?", reply_markup=keyboard)
    return tg.message(OWNER, message_id)
