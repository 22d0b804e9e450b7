"""The Telegram update dedup: an update is recorded once, in its handoff's transaction."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from shelldon.store import Store


def test_a_handed_off_update_is_recorded_with_its_handoff_and_costs_no_second_write(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "shelldon.db", busy_timeout_ms=2000) as store:
        assert store.inbox.put(b"hello", now=1, update_id=7)
        assert store.inbox.is_processed(7)
        # Another process holds the write lock: a second write would wait out the busy
        # timeout; the poller's record of the handed-off update returns at once.
        other = sqlite3.connect(tmp_path / "shelldon.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            started = time.monotonic()
            store.inbox.mark_processed(7)
            assert time.monotonic() - started < 1.0
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert not store.inbox.put(b"hello again", now=2, update_id=7)
        assert [item.blob for item in store.inbox.waiting()] == [b"hello"]


def test_an_update_that_was_not_handed_off_is_recorded_by_the_poller(tmp_path: Path) -> None:
    with Store(tmp_path / "shelldon.db") as store:
        assert not store.inbox.is_processed(8)
        store.inbox.mark_processed(8)
        assert store.inbox.is_processed(8)
        assert not store.inbox.put(b"late", now=1, update_id=8)
        assert store.inbox.waiting() == []
