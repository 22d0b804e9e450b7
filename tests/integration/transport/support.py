"""Test doubles for the transport's collaborators: real sqlite stores and a fake clock."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from shelldon.contracts import Decision, InboundMessage, decode, encode

T = TypeVar("T")


def run(coro: Awaitable[T], timeout: float = 15.0) -> T:
    """Run one test scenario on a fresh event loop, bounded so a hang fails instead."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


class FakeClock:
    """A monotonic clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += max(0.0, seconds)
        await asyncio.sleep(0)


class SqliteLedger:
    """The ``Ledger`` protocol on sqlite, as the real store keeps it."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS processed (update_id INTEGER PRIMARY KEY)")
        self.db.commit()

    def is_processed(self, update_id: int) -> bool:
        row = self.db.execute("SELECT 1 FROM processed WHERE update_id = ?", (update_id,))
        return row.fetchone() is not None

    def mark_processed(self, update_id: int) -> None:
        self.db.execute("INSERT OR IGNORE INTO processed VALUES (?)", (update_id,))
        self.db.commit()

    def close(self) -> None:
        self.db.close()


class EventStore:
    """A durable inbox keyed by update_id, with parked approvals consumed exactly once.

    It plays the lead's handoff: store the event, and for a Decision consume the parked
    approval (first tap wins; later taps are told it was already decided).
    """

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path)
        self.db.executescript(
            """
            CREATE TABLE IF NOT EXISTS inbox (update_id INTEGER PRIMARY KEY, blob BLOB);
            CREATE TABLE IF NOT EXISTS parked (turn_id TEXT PRIMARY KEY);
            CREATE TABLE IF NOT EXISTS decided (turn_id TEXT PRIMARY KEY, approved INTEGER);
            """
        )
        self.db.commit()
        self.handoffs = 0

    def park(self, turn_id: str) -> None:
        self.db.execute("INSERT INTO parked VALUES (?)", (turn_id,))
        self.db.commit()

    async def handoff(self, event: InboundMessage | Decision) -> str | None:
        self.handoffs += 1
        with self.db:
            self.db.execute(
                "INSERT OR IGNORE INTO inbox VALUES (?, ?)", (event.update_id, encode(event))
            )
            if not isinstance(event, Decision):
                return None
            taken = self.db.execute("DELETE FROM parked WHERE turn_id = ?", (event.turn_id,))
            if taken.rowcount == 0:
                return "That was already decided."
            self.db.execute(
                "INSERT INTO decided VALUES (?, ?)", (event.turn_id, int(bool(event.approved)))
            )
        return "Approved." if event.approved else "Denied."

    def events(self) -> list[Any]:
        rows = self.db.execute("SELECT blob FROM inbox ORDER BY update_id").fetchall()
        return [decode(blob) for (blob,) in rows]

    def decisions(self) -> list[tuple[str, int]]:
        return self.db.execute("SELECT turn_id, approved FROM decided").fetchall()

    def close(self) -> None:
        self.db.close()
