"""Scheduled turns (durable: each starts once) and the daily turn budget."""

from __future__ import annotations

import math

from shelldon.store.db import Aggregate
from shelldon.store.rows import Scheduled


class Schedule(Aggregate):
    """Future turns and the budget they spend."""

    def add(self, chat_id: int, due_at: float, prompt: str, now: float) -> int:
        """Persist a future turn; returns its id."""
        with self._db.write(durable=True) as db:
            cur = db.execute(
                "INSERT INTO schedule (chat_id, due_at, prompt, created_at) VALUES (?, ?, ?, ?)",
                (chat_id, due_at, prompt, now),
            )
            return int(cur.lastrowid or 0)

    def due(self, now: float, limit: int = 10) -> list[Scheduled]:
        """Scheduled turns due at ``now`` and not started yet, soonest first."""
        rows = self._db.execute(
            "SELECT id, chat_id, due_at, prompt FROM schedule "
            "WHERE started_at IS NULL AND due_at <= ? ORDER BY due_at, id LIMIT ?",
            (now, limit),
        ).fetchall()
        return [Scheduled(*r) for r in rows]

    def upcoming(self, limit: int = 50) -> list[Scheduled]:
        """Scheduled turns not started yet, soonest first."""
        return self.due(math.inf, limit)

    def cancel(self, schedule_id: int) -> Scheduled | None:
        """Remove a scheduled turn that has not started; returns it, or None if there is none."""
        with self._db.write(durable=True) as db:
            row = db.execute(
                "DELETE FROM schedule WHERE id = ? AND started_at IS NULL "
                "RETURNING id, chat_id, due_at, prompt",
                (schedule_id,),
            ).fetchone()
        return None if row is None else Scheduled(*row)

    def start(self, schedule_id: int, now: float) -> bool:
        """Mark a scheduled turn started; False if it was started before (each starts once)."""
        with self._db.write(durable=True) as db:
            cur = db.execute(
                "UPDATE schedule SET started_at = ? WHERE id = ? AND started_at IS NULL",
                (now, schedule_id),
            )
            return cur.rowcount == 1

    def next_due(self) -> float | None:
        """When the next scheduled turn is due, or None."""
        row = self._db.execute(
            "SELECT MIN(due_at) FROM schedule WHERE started_at IS NULL"
        ).fetchone()
        return None if row[0] is None else float(row[0])

    def spend_budget(self, day: str, weight: int, limit: int) -> bool:
        """Spend ``weight`` from ``day``'s turn budget if it fits under ``limit``."""
        with self._db.write() as db:
            db.execute("INSERT OR IGNORE INTO budget (day, spent) VALUES (?, 0)", (day,))
            cur = db.execute(
                "UPDATE budget SET spent = spent + ? WHERE day = ? AND spent + ? <= ?",
                (weight, day, weight, limit),
            )
            return cur.rowcount == 1

    def budget_spent(self, day: str) -> int:
        """How much of ``day``'s budget is spent."""
        row = self._db.execute("SELECT spent FROM budget WHERE day = ?", (day,)).fetchone()
        return 0 if row is None else int(row[0])
