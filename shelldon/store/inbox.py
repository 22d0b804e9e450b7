"""The inbox of events a transport durably handed off, and the Telegram update ids already
handed off (the poller's ledger), recorded in the same transaction as the handoff."""

from __future__ import annotations

from shelldon.store.db import Aggregate
from shelldon.store.rows import InboxItem


class Inbox(Aggregate):
    """Handed-off events, who took them and when their turn ended; the update dedup."""

    def put(self, blob: bytes, now: float, update_id: int | None = None) -> bool:
        """Durably hand off an inbound event (and mark its update processed, atomically);
        False if this update was handed off before."""
        with self._db.write(durable=True) as db:
            if update_id is not None:
                cur = db.execute(
                    "INSERT OR IGNORE INTO processed_updates VALUES (?, ?)", (update_id, now)
                )
                if cur.rowcount == 0:
                    return False
            db.execute(
                "INSERT INTO inbox (update_id, blob, created_at) VALUES (?, ?, ?)",
                (update_id, blob, now),
            )
        return True

    def is_processed(self, update_id: int) -> bool:
        """Whether a transport update was already handed off."""
        row = self._db.execute(
            "SELECT 1 FROM processed_updates WHERE update_id = ?", (update_id,)
        ).fetchone()
        return row is not None

    def mark_processed(self, update_id: int, now: float = 0.0) -> None:
        """Record an update that was dropped or decided nothing (idempotent); an update ``put``
        handed off is recorded already, in its handoff's transaction, and costs no write."""
        if self.is_processed(update_id):
            return
        with self._db.write(durable=True) as db:
            db.execute("INSERT OR IGNORE INTO processed_updates VALUES (?, ?)", (update_id, now))

    def waiting(self, limit: int = 100) -> list[InboxItem]:
        """Handed-off events not yet taken, oldest first."""
        rows = self._db.execute(
            "SELECT id, update_id, blob FROM inbox WHERE taken_at IS NULL ORDER BY id LIMIT ?",
            (limit,),
        ).fetchall()
        return [InboxItem(r[0], r[1], bytes(r[2])) for r in rows]

    def take(self, item_id: int, now: float, turn_id: str = "") -> bool:
        """Mark an inbox event taken (by ``turn_id`` when it starts a turn); False if someone
        took it already."""
        with self._db.write(durable=bool(turn_id)) as db:
            cur = db.execute(
                "UPDATE inbox SET taken_at = ?, turn_id = ? WHERE id = ? AND taken_at IS NULL",
                (now, turn_id or None, item_id),
            )
            return cur.rowcount == 1

    def finish(self, turn_id: str, now: float) -> None:
        """The turn that took an inbox event has ended (its answer went out)."""
        with self._db.write() as db:
            db.execute(
                "UPDATE inbox SET done_at = ? WHERE turn_id = ? AND done_at IS NULL",
                (now, turn_id),
            )

    def unfinished(self) -> list[tuple[int, str, bytes]]:
        """Events whose turn started but never ended: ``(id, turn_id, blob)``, oldest first."""
        rows = self._db.execute(
            "SELECT id, turn_id, blob FROM inbox WHERE turn_id IS NOT NULL AND done_at IS NULL "
            "ORDER BY id"
        ).fetchall()
        return [(r[0], r[1], bytes(r[2])) for r in rows]

    def unanswered(self) -> list[tuple[int, bytes]]:
        """Events not answered yet, taken by a turn or not: ``(id, blob)``, oldest first."""
        rows = self._db.execute(
            "SELECT id, blob FROM inbox WHERE done_at IS NULL ORDER BY id"
        ).fetchall()
        return [(r[0], bytes(r[1])) for r in rows]

    def abandon(self, item_ids: list[int], now: float) -> None:
        """Close events that will never be answered (taken and done now)."""
        with self._db.write(durable=True) as db:
            db.executemany(
                "UPDATE inbox SET taken_at = COALESCE(taken_at, ?), done_at = ? "
                "WHERE id = ? AND done_at IS NULL",
                [(now, now, item_id) for item_id in item_ids],
            )

    def reoffer(self) -> int:
        """Put events whose turn never ended back in the inbox (after a crash); how many."""
        with self._db.write(durable=True) as db:
            cur = db.execute(
                "UPDATE inbox SET taken_at = NULL, turn_id = NULL "
                "WHERE turn_id IS NOT NULL AND done_at IS NULL"
            )
            return cur.rowcount
