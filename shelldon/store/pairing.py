"""Pairing codes issued while the pet has no owner: one row per Telegram user, the code's digest
only, gone an hour after issue (so a flood of strangers leaves at most an hour's cap of rows)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

from shelldon.store.db import Aggregate
from shelldon.store.rows import PairingCode

KEEP_S = 3600.0
"""How long a row is kept after issue: the window the hourly cap on codes is counted over
(``shelldon.rules.pairing.CAP_WINDOW_S``), and longer than any code lives."""

_GOOD = (
    "SELECT user_id, chat_id, name, username, digest, issued_at, expires_at, "
    "COALESCE(reminded_at, 0), COALESCE(redeemed_at, 0) FROM pairing_codes "
    "WHERE redeemed_at IS NULL AND expires_at > ?"
)
"""The codes still good at a time: unexpired, unredeemed."""


class Pairing(Aggregate):
    """The codes issued (by the transport) and redeemed (by ``shelldon pair``)."""

    def outstanding(self, user_id: int, now: float) -> PairingCode | None:
        """``user_id``'s code while it is still good (unexpired, unredeemed)."""
        row = self._db.execute(
            _GOOD + " AND user_id = ?",
            (now, user_id),
        ).fetchone()
        return PairingCode(*row) if row else None

    def issued_since(self, since: float) -> int:
        """How many codes were issued at or after ``since``."""
        return int(
            self._db.execute(
                "SELECT COUNT(*) FROM pairing_codes WHERE issued_at >= ?", (since,)
            ).fetchone()[0]
        )

    def issue(self, code: PairingCode) -> None:
        """Keep ``code`` (its user's earlier row replaced); rows past ``KEEP_S`` go."""
        with self._db.write(durable=True) as db:
            db.execute("DELETE FROM pairing_codes WHERE issued_at < ?", (code.issued_at - KEEP_S,))
            db.execute(
                "INSERT OR REPLACE INTO pairing_codes (user_id, chat_id, name, username, digest, "
                "issued_at, expires_at) VALUES (:user_id, :chat_id, :name, :username, :digest, "
                ":issued_at, :expires_at)",
                dataclasses.asdict(code),
            )

    def withdraw(self, user_id: int, digest: str) -> None:
        """Forget a code that never reached its user (the send failed): they may ask again."""
        with self._db.write() as db:
            db.execute(
                "DELETE FROM pairing_codes WHERE user_id = ? AND digest = ? "
                "AND redeemed_at IS NULL",
                (user_id, digest),
            )

    def reminded(self, user_id: int, now: float) -> None:
        """Record that ``user_id`` was reminded of their code (reminders are rate-limited)."""
        with self._db.write() as db:
            db.execute("UPDATE pairing_codes SET reminded_at = ? WHERE user_id = ?", (now, user_id))

    @contextmanager
    def redeeming(self, now: float) -> Iterator[list[PairingCode]]:
        """The codes still good, under a write lock held until the block ends. A code handed to
        ``redeem`` inside the block is used up when it ends, exactly once even with two
        commands racing; if the block raises, nothing changes and the code stays good."""
        with self._db.write(durable=True) as db:
            rows = db.execute(_GOOD + " ORDER BY issued_at", (now,)).fetchall()
            yield [PairingCode(*row) for row in rows]

    def redeem(self, code: PairingCode, now: float) -> None:
        """Use ``code`` up, and withdraw every other code still out: the pet has one first
        owner. Call it only inside ``redeeming``."""
        self._db.execute(
            "UPDATE pairing_codes SET redeemed_at = ? WHERE user_id = ? AND digest = ?",
            (now, code.user_id, code.digest),
        )
        self._db.execute("DELETE FROM pairing_codes WHERE redeemed_at IS NULL")
