"""What waits for the owner: parked RISKY calls (approvals), gated tools (promotions) and
failed gates (repair offers), each consumed exactly once, all committed durably."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection

import structlog

from shelldon.contracts import ContractError, RequestToolApproval, decode
from shelldon.store.audit import Audit
from shelldon.store.db import Aggregate
from shelldon.store.rows import ParkedPromotion, Pending, RepairOffer, Taken

log = structlog.get_logger(__name__)


def parked_call(blob: bytes) -> RequestToolApproval:
    """The call a parked approval's ``blob`` holds; ``ContractError`` if it holds none."""
    parked = decode(blob)
    if not isinstance(parked, RequestToolApproval):
        raise ContractError(f"parked blob holds {type(parked).__name__}")
    return parked


class Parked(Aggregate):
    """The parked approvals, promotions and repair offers."""

    def park_approval(
        self, turn_id: str, chat_id: int, blob: bytes, summary: str, now: float, ttl_s: float
    ) -> None:
        """Park a RISKY call's resume state until the owner decides or ``ttl_s`` passes."""
        with self._db.write(durable=True) as db:
            db.execute(
                "INSERT INTO pending_approvals VALUES (?, ?, ?, ?, ?, ?)",
                (turn_id, chat_id, blob, summary, now, now + ttl_s),
            )

    def take_approval(self, turn_id: str, now: float) -> Taken:
        """Consume a parked approval exactly once; an expired row is consumed and reported."""
        with self._db.write(durable=True) as db:
            row = db.execute(
                "DELETE FROM pending_approvals WHERE turn_id = ? "
                "RETURNING chat_id, blob, summary, expires_at",
                (turn_id,),
            ).fetchone()
        if row is None:
            return Taken("unknown", turn_id)
        status = "ok" if now < row[3] else "expired"
        return Taken(status, turn_id, row[0], bytes(row[1]), row[2])

    def take_call(
        self, turn_id: str, approved: bool, now: float, tapped_at: float = 0.0
    ) -> tuple[RequestToolApproval | None, str]:
        """Consume the call parked under ``turn_id`` and audit the owner's decision on it; its
        expiry is judged at ``tapped_at`` (when a queued tap was accepted; 0: now). Returns the
        call and "ok", or None and why: "expired", "unknown" (decided already), "corrupt"."""
        taken = self.take_approval(turn_id, tapped_at or now)
        if taken.status != "ok":
            log.info("approval_not_taken", turn_id=turn_id, status=taken.status)
            return None, taken.status
        audit = Audit(self._db)
        try:
            parked = parked_call(taken.blob)
        except ContractError as exc:
            log.error("parked_approval_corrupt", turn_id=turn_id, error=str(exc))
            error = {"error": str(exc)}
            audit.record("approvals", "corrupt", turn_id, error, now, turn_id=turn_id)
            return None, "corrupt"
        action, call = "approved" if approved else "denied", parked.call
        audit.record("owner", action, call.name, {"args": call.args}, now, turn_id=turn_id)
        return parked, "ok"

    def parked_approval(self, turn_id: str) -> bytes:
        """The blob parked under ``turn_id`` without consuming it (b"" if none)."""
        row = self._db.execute(
            "SELECT blob FROM pending_approvals WHERE turn_id = ?", (turn_id,)
        ).fetchone()
        return bytes(row[0]) if row else b""

    def park_promotion(
        self,
        turn_id: str,
        chat_id: int,
        name: str,
        code_hash: str,
        summary: str,
        now: float,
        ttl_s: float,
        *,
        code: bytes = b"",
        test: bytes = b"",
        replaces_hash: str = "",
    ) -> None:
        """Park a gated tool, with the bytes the gate passed, until the owner decides whether
        to promote it; ``replaces_hash`` is the live code a replacement was shown against."""
        with self._db.write(durable=True) as db:
            db.execute(
                "INSERT INTO pending_promotions (turn_id, chat_id, name, code_hash, summary, "
                "created_at, expires_at, code, test, replaces_hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    turn_id,
                    chat_id,
                    name,
                    code_hash,
                    summary,
                    now,
                    now + ttl_s,
                    code,
                    test,
                    replaces_hash,
                ),
            )

    def take_promotion(self, turn_id: str, now: float) -> ParkedPromotion:
        """Consume a parked promotion exactly once; ``code`` and ``test`` are the parked bytes
        (empty for a row parked before they were kept)."""
        with self._db.write(durable=True) as db:
            row = db.execute(
                "DELETE FROM pending_promotions WHERE turn_id = ? "
                "RETURNING chat_id, name, code_hash, summary, expires_at, code, test, "
                "replaces_hash",
                (turn_id,),
            ).fetchone()
        if row is None:
            return ParkedPromotion("unknown", turn_id)
        status = "ok" if now < row[4] else "expired"
        # str(): a row written by other hands may hold BLOBs where the name and hash go.
        name, digest, code, test = str(row[1]), str(row[2]), bytes(row[5]), bytes(row[6])
        return ParkedPromotion(status, turn_id, row[0], name, digest, row[3], code, test, row[7])

    def promotion_names(self) -> set[str]:
        """Names of the tools whose promotion is parked."""
        return {r[0] for r in self._db.execute("SELECT name FROM pending_promotions")}

    def parked_promotion(self, turn_id: str) -> tuple[str, bytes] | None:
        """The name and code of the promotion parked under ``turn_id``, without consuming it."""
        row = self._db.execute(
            "SELECT name, code FROM pending_promotions WHERE turn_id = ?", (turn_id,)
        ).fetchone()
        return (row[0], bytes(row[1])) if row else None

    def parked_code(self, name: str) -> bytes:
        """The code of the newest promotion of ``name`` waiting for the owner (b"" if none)."""
        row = self._db.execute(
            "SELECT code FROM pending_promotions WHERE name = ? ORDER BY created_at DESC LIMIT 1",
            (name,),
        ).fetchone()
        return bytes(row[0]) if row else b""

    def promotions_without_code(self) -> list[tuple[str, str, str]]:
        """(turn_id, name, code_hash) of parked promotions whose bytes were not kept (parked
        by a version that staged them in the workspace)."""
        rows = self._db.execute(
            "SELECT turn_id, name, code_hash FROM pending_promotions WHERE length(code) = 0"
        ).fetchall()
        return [(r[0], r[1], r[2]) for r in rows]

    def keep_promotion_code(self, turn_id: str, code: bytes, test: bytes) -> bool:
        """Attach the parked bytes to an older promotion row; only if they hash to the row's
        ``code_hash`` is the caller's business (``shelldon.toolbox.legacy`` checks)."""
        with self._db.write(durable=True) as db:
            cur = db.execute(
                "UPDATE pending_promotions SET code = ?, test = ? "
                "WHERE turn_id = ? AND length(code) = 0",
                (code, test, turn_id),
            )
            return cur.rowcount == 1

    def park_repair(self, offer: RepairOffer, summary: str, now: float, ttl_s: float) -> None:
        """Park a failed gate's repair offer until the owner taps "Try to fix" or "Drop"."""
        row = dataclasses.asdict(offer)
        row.update(summary=summary, created_at=now, expires_at=now + ttl_s)
        with self._db.write(durable=True) as db:
            db.execute(
                "INSERT INTO repair_offers (offer_id, chat_id, name, round, code, test, "
                "replaces, report, summary, created_at, expires_at) VALUES (:offer_id, "
                ":chat_id, :name, :round, :code, :test, :replaces, :report, :summary, "
                ":created_at, :expires_at)",
                row,
            )

    def take_repair(self, offer_id: str, now: float, turn_id: str = "") -> RepairOffer | None:
        """Consume a repair offer exactly once (None if it is unknown, taken or expired); a
        ``turn_id`` records the repair turn it starts, which ``repair_round_of`` answers for."""
        with self._db.write(durable=True) as db:
            row = db.execute(
                "UPDATE repair_offers SET taken_at = ?, turn_id = ? "
                "WHERE offer_id = ? AND taken_at IS NULL AND expires_at > ? "
                "RETURNING offer_id, chat_id, name, round, code, test, replaces, report",
                (now, turn_id or None, offer_id, now),
            ).fetchone()
        if row is None:
            return None
        return RepairOffer(
            row[0], row[1], row[2], int(row[3]), bytes(row[4]), bytes(row[5]), row[6], row[7]
        )

    def repair_round_of(self, turn_id: str) -> int:
        """The repair round a turn's proposals belong to: one past the offer it was started
        from, or 0 for a turn no repair offer started."""
        row = self._db.execute(
            "SELECT round FROM repair_offers WHERE turn_id = ?", (turn_id,)
        ).fetchone()
        return int(row[0]) + 1 if row else 0

    def pending(self) -> list[Pending]:
        """Every parked approval, promotion and untaken repair offer, oldest first."""
        rows = self._db.execute(
            "SELECT 'approval', turn_id, chat_id, summary, created_at, expires_at "
            "FROM pending_approvals UNION ALL "
            "SELECT 'promotion', turn_id, chat_id, summary, created_at, expires_at "
            "FROM pending_promotions UNION ALL "
            "SELECT 'repair', offer_id, chat_id, summary, created_at, expires_at "
            "FROM repair_offers WHERE taken_at IS NULL ORDER BY 5"
        ).fetchall()
        return [Pending(*r) for r in rows]

    def expire_pending(self, now: float, keep: Collection[str] = ()) -> list[Pending]:
        """Remove and return parked rows whose TTL has passed, except the approvals and repair
        offers in ``keep`` (the owner's decision on them is already queued)."""
        kept = json.dumps(sorted(keep))
        with self._db.write(durable=True) as db:
            approvals = db.execute(
                "DELETE FROM pending_approvals WHERE expires_at <= ? "
                "AND turn_id NOT IN (SELECT value FROM json_each(?)) "
                "RETURNING turn_id, chat_id, summary, created_at, expires_at",
                (now, kept),
            ).fetchall()
            promotions = db.execute(
                "DELETE FROM pending_promotions WHERE expires_at <= ? "
                "RETURNING turn_id, chat_id, summary, created_at, expires_at",
                (now,),
            ).fetchall()
            # A taken offer stays: it records which turn repaired what, in which round.
            repairs = db.execute(
                "DELETE FROM repair_offers WHERE expires_at <= ? AND taken_at IS NULL "
                "AND offer_id NOT IN (SELECT value FROM json_each(?)) "
                "RETURNING offer_id, chat_id, summary, created_at, expires_at",
                (now, kept),
            ).fetchall()
        return (
            [Pending("approval", *r) for r in approvals]
            + [Pending("promotion", *r) for r in promotions]
            + [Pending("repair", *r) for r in repairs]
        )
