"""The conversation and the remembered facts: kept with ``NORMAL`` durability (a power cut
may forget the last few), except what the owner deletes."""

from __future__ import annotations

from shelldon.store.db import Aggregate
from shelldon.store.rows import Fact, StoredMessage


class Conversation(Aggregate):
    """Each chat's messages, and the facts the pet remembers."""

    def append(self, chat_id: int, role: str, content: str, now: float) -> None:
        """Add one message to a chat's conversation."""
        with self._db.write() as db:
            db.execute(
                "INSERT INTO messages (chat_id, role, content, created_at) VALUES (?, ?, ?, ?)",
                (chat_id, role, content, now),
            )

    def recent(self, chat_id: int, limit: int = 50) -> list[StoredMessage]:
        """The last ``limit`` messages of a chat, oldest first."""
        rows = self._db.execute(
            "SELECT role, content, created_at FROM messages WHERE chat_id = ? "
            "ORDER BY id DESC LIMIT ?",
            (chat_id, limit),
        ).fetchall()
        return [StoredMessage(r[0], r[1], r[2]) for r in reversed(rows)]

    def remember(self, fact: str, now: float) -> bool:
        """Keep a fact; False if it was already known."""
        with self._db.write() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO facts (fact, created_at) VALUES (?, ?)", (fact, now)
            )
            return cur.rowcount == 1

    def facts(self, limit: int = 100) -> list[str]:
        """Remembered facts, oldest first."""
        return [f.fact for f in self.numbered_facts(limit)]

    def numbered_facts(self, limit: int = 100) -> list[Fact]:
        """Remembered facts with their numbers, oldest first."""
        rows = self._db.execute("SELECT id, fact FROM facts ORDER BY id LIMIT ?", (limit,))
        return [Fact(r[0], r[1]) for r in rows.fetchall()]

    def forget(self, fact_id: int) -> str | None:
        """Delete fact number ``fact_id``; returns what it said, or None if there is none."""
        with self._db.write(durable=True) as db:
            row = db.execute("DELETE FROM facts WHERE id = ? RETURNING fact", (fact_id,)).fetchone()
        return None if row is None else str(row[0])

    def clear(self, chat_id: int) -> int:
        """Drop a chat's conversation history (a fresh start); returns how many messages went."""
        with self._db.write(durable=True) as db:
            cur = db.execute("DELETE FROM messages WHERE chat_id = ?", (chat_id,))
            return cur.rowcount
