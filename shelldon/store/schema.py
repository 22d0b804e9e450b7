"""The schema: forward-only migrations versioned with ``PRAGMA user_version``, and the check
that a database this code did not write (one from a backup) is exactly what they make."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from shelldon.store.db import Db, StoreError

_MIGRATIONS: tuple[str, ...] = (
    # v1
    """
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY, chat_id INTEGER NOT NULL, role TEXT NOT NULL,
        content TEXT NOT NULL, created_at REAL NOT NULL);
    CREATE INDEX messages_chat ON messages (chat_id, id);
    CREATE TABLE facts (
        id INTEGER PRIMARY KEY, fact TEXT NOT NULL UNIQUE, created_at REAL NOT NULL);
    CREATE TABLE pending_approvals (
        turn_id TEXT PRIMARY KEY, chat_id INTEGER NOT NULL, blob BLOB NOT NULL,
        summary TEXT NOT NULL, created_at REAL NOT NULL, expires_at REAL NOT NULL);
    CREATE TABLE pending_promotions (
        turn_id TEXT PRIMARY KEY, chat_id INTEGER NOT NULL, name TEXT NOT NULL,
        code_hash TEXT NOT NULL, summary TEXT NOT NULL,
        created_at REAL NOT NULL, expires_at REAL NOT NULL);
    CREATE TABLE tool_health (
        name TEXT PRIMARY KEY, strikes INTEGER NOT NULL, last_error TEXT NOT NULL,
        updated_at REAL NOT NULL);
    CREATE TABLE schedule (
        id INTEGER PRIMARY KEY, chat_id INTEGER NOT NULL, due_at REAL NOT NULL,
        prompt TEXT NOT NULL, created_at REAL NOT NULL, started_at REAL);
    CREATE INDEX schedule_due ON schedule (started_at, due_at);
    CREATE TABLE budget (day TEXT PRIMARY KEY, spent INTEGER NOT NULL);
    CREATE TABLE processed_updates (
        update_id INTEGER PRIMARY KEY, processed_at REAL NOT NULL);
    CREATE TABLE inbox (
        id INTEGER PRIMARY KEY, update_id INTEGER UNIQUE, blob BLOB NOT NULL,
        created_at REAL NOT NULL, taken_at REAL);
    CREATE TABLE audit (
        id INTEGER PRIMARY KEY, ts REAL NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL,
        subject TEXT NOT NULL, detail TEXT NOT NULL, code_hash TEXT NOT NULL DEFAULT '',
        turn_id TEXT NOT NULL DEFAULT '');
    CREATE TRIGGER audit_append_only_update BEFORE UPDATE ON audit
        BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
    CREATE TRIGGER audit_append_only_delete BEFORE DELETE ON audit
        BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
    """,
    # v2: the inbox remembers which turn took a message and when that turn ended, so a
    # message whose turn was cut short by a crash is answered after the restart.
    """
    ALTER TABLE inbox ADD COLUMN turn_id TEXT;
    ALTER TABLE inbox ADD COLUMN done_at REAL;
    """,
    # v3: what the owner approved is kept here, out of every worker's reach. A parked
    # promotion holds the gated bytes themselves (promotion writes those, never a staged file
    # a test could have linked); approved_tools holds the code hash of every self-coded tool
    # the owner let in, and whether it is live or quarantined.
    """
    ALTER TABLE pending_promotions ADD COLUMN code BLOB NOT NULL DEFAULT x'';
    ALTER TABLE pending_promotions ADD COLUMN test BLOB NOT NULL DEFAULT x'';
    CREATE TABLE approved_tools (
        name TEXT PRIMARY KEY, code_hash TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('live', 'quarantined')),
        approved_at REAL NOT NULL, turn_id TEXT NOT NULL DEFAULT '');
    """,
    # v4, model usage: one row per model call the broker completed (provider, model, tokens),
    # written by the actor side, never by a worker, so /usage can count today and this month.
    """
    CREATE TABLE model_calls (
        id INTEGER PRIMARY KEY, ts REAL NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,
        input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
        turn_id TEXT NOT NULL DEFAULT '');
    CREATE INDEX model_calls_ts ON model_calls (ts);
    """,
    # v5, the toolbox's lifecycle: a parked promotion that replaces a live tool names the
    # approved hash it was diffed against (a promotion is refused if that tool changed since
    # the owner saw the diff); a failed gate parks a repair offer the owner may take ("Try to
    # fix"), at most once, and the repair turn it started is recorded with its round, so the
    # round cap is counted from the service's own records, never from anything a model said.
    """
    ALTER TABLE pending_promotions ADD COLUMN replaces_hash TEXT NOT NULL DEFAULT '';
    CREATE TABLE repair_offers (
        offer_id TEXT PRIMARY KEY, chat_id INTEGER NOT NULL, name TEXT NOT NULL,
        round INTEGER NOT NULL, code BLOB NOT NULL, test BLOB NOT NULL,
        replaces TEXT NOT NULL, report TEXT NOT NULL, summary TEXT NOT NULL,
        created_at REAL NOT NULL, expires_at REAL NOT NULL,
        taken_at REAL, turn_id TEXT UNIQUE);
    """,
    # v6: the approval cards the transport sent, so a decided or expired card is edited to
    # what was asked plus its outcome (and only the first outcome), also after a restart.
    """
    CREATE TABLE cards (
        turn_id TEXT PRIMARY KEY, chat_id INTEGER NOT NULL, message_id INTEGER NOT NULL,
        text TEXT NOT NULL, outcome TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL);
    """,
    # v7: pairing codes issued while the pet has no owner (shelldon.rules.pairing): the
    # code's digest only, checked by `shelldon pair` as root, never by anything in Telegram.
    """
    CREATE TABLE pairing_codes (
        user_id INTEGER PRIMARY KEY, chat_id INTEGER NOT NULL, name TEXT NOT NULL,
        username TEXT NOT NULL, digest TEXT NOT NULL, issued_at REAL NOT NULL,
        expires_at REAL NOT NULL, reminded_at REAL, redeemed_at REAL);
    """,
)

SCHEMA_VERSION = len(_MIGRATIONS)


def migrate(db: Db) -> None:
    """Bring ``db`` up to ``SCHEMA_VERSION``; a newer database is refused."""
    with db.write() as conn:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"database {db.path} has schema v{version}, newer than this shelldon "
                f"(v{SCHEMA_VERSION}); upgrade shelldon or restore a backup"
            )
        for number in range(version, SCHEMA_VERSION):
            for statement in _split_sql(_MIGRATIONS[number]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number + 1}")


SchemaObject = tuple[str, str, str, str]
"""(type, name, table, SQL with its whitespace collapsed) of one table, index or trigger."""


def schema_objects(db: sqlite3.Connection) -> frozenset[SchemaObject]:
    """Every object in ``db``'s schema; sqlite's automatic indexes (which have no SQL) aside."""
    rows = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    return frozenset(
        (str(kind), str(name), str(table), " ".join(str(sql or "").split()))
        for kind, name, table, sql in rows
        if not (kind == "index" and sql is None and str(name).startswith("sqlite_autoindex_"))
    )


def expected_schema(version: int) -> frozenset[SchemaObject]:
    """The schema this code's migrations make at ``version``."""
    db = sqlite3.connect(":memory:")
    try:
        for migration in _MIGRATIONS[:version]:
            for statement in _split_sql(migration):
                db.execute(statement)
        return schema_objects(db)
    finally:
        db.close()


def check_foreign_database(path: Path) -> int:
    """Check a database file this code did not write (one from a backup) before a ``Store``
    opens it: sound, of a schema version this code knows, and holding exactly the tables,
    indexes and triggers our migrations make for that version — a planted trigger or view
    would run inside later writes (rewrite a parked call after its card was shown). Returns
    its schema version; ``StoreError`` says what is wrong."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open database {path.name}: {exc}") from None
    try:
        db.execute("PRAGMA trusted_schema = OFF")
        verdict = db.execute("PRAGMA quick_check").fetchone()[0]
        if verdict != "ok":
            raise StoreError(f"database {path.name} is damaged: {str(verdict)[:200]}")
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        if not 1 <= version <= SCHEMA_VERSION:
            raise StoreError(
                f"database {path.name} has schema v{version}; this shelldon knows v1 to "
                f"v{SCHEMA_VERSION}" + ("; upgrade shelldon" if version > SCHEMA_VERSION else "")
            )
        found, wanted = schema_objects(db), expected_schema(version)
    except sqlite3.Error as exc:
        raise StoreError(f"database {path.name} cannot be read: {exc}") from None
    finally:
        db.close()
    if found != wanted:
        extra = sorted(f"{kind} {name}" for kind, name, _t, _s in found - wanted)
        missing = sorted(f"{kind} {name}" for kind, name, _t, _s in wanted - found)
        parts = [f"not shelldon's or altered: {', '.join(extra[:5])}"] if extra else []
        parts += [f"missing: {', '.join(missing[:5])}"] if missing else []
        raise StoreError(
            f"database {path.name} is not the schema shelldon makes (v{version}); "
            + "; ".join(parts)
        )
    return version


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements (triggers contain ';' inside BEGIN…END)."""
    statements: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            if current.strip():
                statements.append(current.strip())
            current = ""
    if current.strip():
        statements.append(current.strip())
    return statements
