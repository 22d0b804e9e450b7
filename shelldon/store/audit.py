"""The append-only audit log (who decided what, what ran, what moved), and what a restore
takes out of a database it did not write."""

from __future__ import annotations

import json
from typing import Any

from shelldon.store.db import Aggregate
from shelldon.store.rows import AuditEntry, Distrusted


class Audit(Aggregate):
    """The audit log."""

    def record(
        self,
        actor: str,
        action: str,
        subject: str,
        detail: dict[str, Any],
        now: float,
        *,
        code_hash: str = "",
        turn_id: str = "",
    ) -> None:
        """Append one entry to the audit log (who decided what, what ran, what moved)."""
        text = json.dumps(detail, sort_keys=True, default=str)
        with self._db.write(durable=True) as db:
            db.execute(
                "INSERT INTO audit (ts, actor, action, subject, detail, code_hash, turn_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (now, actor, action, subject, text, code_hash, turn_id),
            )

    def log(self, limit: int = 100) -> list[AuditEntry]:
        """The newest ``limit`` audit entries, oldest first."""
        rows = self._db.execute(
            "SELECT ts, actor, action, subject, detail, code_hash, turn_id FROM audit "
            "ORDER BY id DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [
            AuditEntry(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5], r[6]) for r in reversed(rows)
        ]

    def distrust_for_restore(self, now: float) -> Distrusted:
        """Take out what a restored database cannot be trusted with (see ``Distrusted``): only
        the owner's decisions on this device may make a tool live or resume a parked call."""
        with self._db.write(durable=True) as db:
            tools = db.execute("DELETE FROM approved_tools").rowcount
            approvals = db.execute("DELETE FROM pending_approvals").rowcount
            promotions = db.execute("DELETE FROM pending_promotions").rowcount
            # Parked decisions too: an untaken repair offer (its code and the gate's text came
            # with the backup) and the cards of calls that no longer wait (their message ids
            # name messages of another chat history).
            db.execute("DELETE FROM repair_offers WHERE taken_at IS NULL")
            db.execute("DELETE FROM cards")
            # A pairing code issued on another device must not make its holder owner here.
            db.execute("DELETE FROM pairing_codes")
            inbox = db.execute(
                "UPDATE inbox SET taken_at = COALESCE(taken_at, ?), done_at = ? "
                "WHERE done_at IS NULL",
                (now, now),
            ).rowcount
        return Distrusted(tools, approvals, promotions, inbox)
