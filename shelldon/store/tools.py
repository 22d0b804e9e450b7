"""The self-coded tools the owner approved (code hash, live or quarantined) and their health
(strikes), all committed durably: they decide what code may run."""

from __future__ import annotations

from shelldon.store.db import Aggregate
from shelldon.store.rows import TOOL_STATES, ApprovedTool, ToolHealth

_APPROVALS = "SELECT name, code_hash, state, approved_at FROM approved_tools"


class Tools(Aggregate):
    """Approved tools and their strikes."""

    def approve(self, name: str, code_hash: str, now: float, turn_id: str = "") -> None:
        """Record that the owner approved ``code_hash`` as live tool ``name`` (a replacement
        overwrites the old hash): the only way code becomes a live tool."""
        with self._db.write(durable=True) as db:
            db.execute(
                "INSERT INTO approved_tools (name, code_hash, state, approved_at, turn_id) "
                "VALUES (?, ?, 'live', ?, ?) ON CONFLICT (name) DO UPDATE SET "
                "code_hash = excluded.code_hash, state = 'live', "
                "approved_at = excluded.approved_at, turn_id = excluded.turn_id",
                (name, code_hash, now, turn_id),
            )

    def forget(self, name: str) -> ApprovedTool | None:
        """Withdraw the approval of tool ``name`` (the owner retired it): from now on no
        manifest lists it and no file of that name runs. Returns the approval it withdrew."""
        with self._db.write(durable=True) as db:
            row = db.execute(
                "DELETE FROM approved_tools WHERE name = ? "
                "RETURNING name, code_hash, state, approved_at",
                (name,),
            ).fetchone()
        return ApprovedTool(*row) if row else None

    def set_state(self, name: str, state: str) -> bool:
        """Mark approved tool ``name`` live or quarantined (its approved hash is untouched);
        False if no such tool was ever approved."""
        if state not in TOOL_STATES:
            raise ValueError(f"a tool state is one of {TOOL_STATES}, not {state!r}")
        with self._db.write(durable=True) as db:
            cur = db.execute("UPDATE approved_tools SET state = ? WHERE name = ?", (state, name))
            return cur.rowcount == 1

    def approved(self) -> list[ApprovedTool]:
        """Every approved self-coded tool, by name."""
        rows = self._db.execute(_APPROVALS + " ORDER BY name").fetchall()
        return [ApprovedTool(*r) for r in rows]

    def approval(self, name: str) -> ApprovedTool | None:
        """The approval of tool ``name``, or None."""
        row = self._db.execute(_APPROVALS + " WHERE name = ?", (name,)).fetchone()
        return ApprovedTool(*row) if row else None

    def promoted_hashes(self) -> dict[str, str]:
        """From the audit log: the code hash of each tool's latest promotion by the owner (what
        a toolbox kept in the workspace, before approvals were recorded, was approved as).
        Empty once the database was restored from a backup: its promotions came in the backup,
        which may come from anywhere, and no version since writes that old toolbox."""
        rows = self._db.execute(
            "SELECT subject, code_hash FROM audit WHERE action = 'promoted' "
            "AND actor = 'owner' AND code_hash != '' AND NOT EXISTS (SELECT 1 FROM audit "
            "WHERE action = 'restored' AND actor = 'owner') ORDER BY id"
        ).fetchall()
        return {r[0]: r[1] for r in rows}

    def strike(self, name: str, error: str, now: float) -> int:
        """Debit one strike against a self-coded tool; returns its new strike count."""
        with self._db.write(durable=True) as db:
            row = db.execute(
                "INSERT INTO tool_health (name, strikes, last_error, updated_at) "
                "VALUES (?, 1, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                "strikes = strikes + 1, last_error = excluded.last_error, "
                "updated_at = excluded.updated_at RETURNING strikes",
                (name, error[:2000], now),
            ).fetchone()
        return int(row[0])

    def reset_strikes(self, name: str) -> None:
        """Forget a tool's strikes (on restore)."""
        with self._db.write(durable=True) as db:
            db.execute("DELETE FROM tool_health WHERE name = ?", (name,))

    def health(self) -> list[ToolHealth]:
        """Every tool with strikes, most struck first."""
        rows = self._db.execute(
            "SELECT name, strikes, last_error FROM tool_health ORDER BY strikes DESC, name"
        ).fetchall()
        return [ToolHealth(*r) for r in rows]
