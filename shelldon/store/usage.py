"""Model usage: one row per model call the broker completed, written by the actor side, never
by a worker, so /usage can count today and this month."""

from __future__ import annotations

from shelldon.store.db import Aggregate
from shelldon.store.rows import UsageRow


class Usage(Aggregate):
    """The model calls, counted."""

    def record(
        self,
        provider: str,
        model: str,
        input_tokens: int,
        output_tokens: int,
        now: float,
        turn_id: str = "",
    ) -> None:
        """Count one completed model call (``NORMAL`` durability: a power cut may forget the
        last few, as it may the conversation)."""
        with self._db.write() as db:
            db.execute(
                "INSERT INTO model_calls "
                "(ts, provider, model, input_tokens, output_tokens, turn_id) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (now, provider, model, max(0, input_tokens), max(0, output_tokens), turn_id),
            )

    def between(self, start: float, end: float) -> list[UsageRow]:
        """Model calls and tokens per provider and model with ``start <= ts < end``."""
        rows = self._db.execute(
            "SELECT provider, model, COUNT(*), SUM(input_tokens), SUM(output_tokens) "
            "FROM model_calls WHERE ts >= ? AND ts < ? GROUP BY provider, model "
            "ORDER BY provider, model",
            (start, end),
        ).fetchall()
        return [UsageRow(r[0], r[1], int(r[2]), int(r[3]), int(r[4])) for r in rows]
