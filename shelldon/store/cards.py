"""The approval cards the transport sent, so a decided or expired card is edited to what was
asked plus its first outcome, also after a restart."""

from __future__ import annotations

from shelldon.store.db import Aggregate
from shelldon.store.rows import Card

CARD_KEEP_S = 7 * 24 * 3600.0
"""How long an approval card is remembered (a week: longer than any approval's TTL)."""


class Cards(Aggregate):
    """The cards sent, by turn."""

    def record(self, turn_id: str, chat_id: int, message_id: int, text: str, now: float) -> None:
        """Remember the card sent for ``turn_id``; cards past ``CARD_KEEP_S`` are forgotten
        (Telegram lets a bot edit a message for 48 hours)."""
        with self._db.write() as db:
            db.execute("DELETE FROM cards WHERE created_at < ?", (now - CARD_KEEP_S,))
            db.execute(
                "INSERT OR REPLACE INTO cards (turn_id, chat_id, message_id, text, outcome, "
                "created_at) VALUES (?, ?, ?, ?, '', ?)",
                (turn_id, chat_id, message_id, text, now),
            )

    def get(self, turn_id: str) -> Card | None:
        """The card sent for ``turn_id``, if it is remembered."""
        row = self._db.execute(
            "SELECT turn_id, chat_id, message_id, text, outcome FROM cards WHERE turn_id = ?",
            (turn_id,),
        ).fetchone()
        return Card(*row) if row else None

    def close(self, turn_id: str, outcome: str) -> bool:
        """Record a card's final outcome; False if it had one already (the first one stands)."""
        with self._db.write() as db:
            cur = db.execute(
                "UPDATE cards SET outcome = ? WHERE turn_id = ? AND outcome = ''",
                (outcome, turn_id),
            )
            return cur.rowcount == 1
