"""The sqlite store: conversation, memory, parked approvals and promotions, tool health,
the approved self-coded tools, schedule, budget, model usage, Telegram update dedup, the inbox
of handed-off events, and the audit log.

One file under home, WAL mode, a busy timeout so several actor processes can share it, and a
schema versioned with ``PRAGMA user_version`` and forward-only migrations. Writes that must
survive power loss (parked and consumed approvals and promotions, the inbox handoff, strikes,
the schedule, the audit log) commit with ``synchronous=FULL``; the conversation, facts and
budget commit with ``NORMAL`` (WAL keeps the file consistent; a power cut may forget the last
few of them), which keeps an fsync out of every turn's path. Every time is passed in (``now``)
so tests use a fake clock. Each process opens its own ``Store``; the store that opens a
connection closes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
)

SCHEMA_VERSION = len(_MIGRATIONS)

CARD_KEEP_S = 7 * 24 * 3600.0
"""How long an approval card is remembered (a week: longer than any approval's TTL)."""


class StoreError(RuntimeError):
    """The database cannot be used (newer schema than this code, unreadable file)."""


@dataclass(frozen=True, slots=True)
class Taken:
    """The outcome of taking a parked row: ``status`` is "ok", "expired" or "unknown"."""

    status: str
    turn_id: str
    chat_id: int = 0
    blob: bytes = b""
    summary: str = ""
    # A promotion's parked bytes: the code the gate passed (and its test), hash-checked by
    # whoever promotes them.
    code: bytes = b""
    test: bytes = b""
    # A replacement's base: the approved hash of the tool it was diffed against ("" if none).
    replaces_hash: str = ""


@dataclass(frozen=True, slots=True)
class RepairOffer:
    """A failed gate the owner may ask to have fixed: the proposal that failed, what the gate
    reported (model-influenced text), and which repair round it was (0: the first proposal)."""

    offer_id: str
    chat_id: int
    name: str
    round: int
    code: bytes
    test: bytes
    replaces: str
    report: str


@dataclass(frozen=True, slots=True)
class Pending:
    """A parked approval, promotion or repair offer, for /pending."""

    kind: str
    turn_id: str
    chat_id: int
    summary: str
    created_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class Card:
    """An approval card as sent: its message, its text (HTML) and its outcome ("" while open)."""

    turn_id: str
    chat_id: int
    message_id: int
    text: str
    outcome: str


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A scheduled turn."""

    id: int
    chat_id: int
    due_at: float
    prompt: str


@dataclass(frozen=True, slots=True)
class Fact:
    """A remembered fact and its number (its id: numbers stay put when another is forgotten)."""

    id: int
    fact: str


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Model calls and tokens of one provider and model over some time."""

    provider: str
    model: str
    calls: int
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A conversation message as stored."""

    role: str
    content: str
    created_at: float


@dataclass(frozen=True, slots=True)
class ToolHealth:
    """A tool's strike count and its last error."""

    name: str
    strikes: int
    last_error: str


@dataclass(frozen=True, slots=True)
class ApprovedTool:
    """A self-coded tool the owner approved: the sha256 of its code, and where it is."""

    name: str
    code_hash: str
    state: str  # "live" or "quarantined"
    approved_at: float


TOOL_STATES = ("live", "quarantined")


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One line of the audit log."""

    ts: float
    actor: str
    action: str
    subject: str
    detail: dict[str, Any]
    code_hash: str
    turn_id: str


@dataclass(frozen=True, slots=True)
class Distrusted:
    """What a restore took out of a database it did not write: tool approvals (each tool is
    gated and asked for again), parked approvals and promotions, and unanswered inbox events."""

    approved_tools: int = 0
    approvals: int = 0
    promotions: int = 0
    inbox: int = 0


@dataclass(frozen=True, slots=True)
class InboxItem:
    """An event durably handed off by a transport, not yet taken by the arbiter."""

    id: int
    update_id: int | None
    blob: bytes


class Store:
    """The sqlite store; open one per process with ``Store(path)``, close it with ``close()``."""

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 5000) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # exists already, or sqlite will say why
            # Created 0600 before sqlite sees it: its -wal and -shm files copy this mode.
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        try:
            # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, so writers queue on
            # the busy timeout instead of failing with "database is locked" mid-transaction.
            self._db = sqlite3.connect(
                self.path, isolation_level=None, timeout=busy_timeout_ms / 1000
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}") from None
        try:
            self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            # A small page cache: every actor process holds a connection on a 416 MB board.
            self._db.execute("PRAGMA cache_size = -512")
            self._db.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreError(f"cannot use database {self.path}: {exc}") from None
        except StoreError:
            self._db.close()
            raise

    def backup_to(self, path: Path) -> None:
        """Copy the whole database into the new file ``path`` (created 0600) with sqlite's online
        backup: one consistent snapshot while other processes keep writing (WAL readers do not
        block writers), left as a self-contained file with a rollback journal."""
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        target = sqlite3.connect(path)
        try:
            # pages=-1: every page in one step, under one read transaction, so one snapshot.
            self._db.backup(target, pages=-1)
            target.execute("PRAGMA journal_mode = DELETE")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot back up database {self.path}: {exc}") from None
        finally:
            target.close()

    def distrust_for_restore(self, now: float) -> Distrusted:
        """Take out what a restored database cannot be trusted with (see ``Distrusted``): only
        the owner's decisions on this device may make a tool live or resume a parked call."""
        with self._write(durable=True) as db:
            tools = db.execute("DELETE FROM approved_tools").rowcount
            approvals = db.execute("DELETE FROM pending_approvals").rowcount
            promotions = db.execute("DELETE FROM pending_promotions").rowcount
            # Parked decisions too: an untaken repair offer (its code and the gate's text came
            # with the backup) and the cards of calls that no longer wait (their message ids
            # name messages of another chat history).
            db.execute("DELETE FROM repair_offers WHERE taken_at IS NULL")
            db.execute("DELETE FROM cards")
            inbox = db.execute(
                "UPDATE inbox SET taken_at = COALESCE(taken_at, ?), done_at = ? "
                "WHERE done_at IS NULL",
                (now, now),
            ).rowcount
        return Distrusted(tools, approvals, promotions, inbox)

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self, *, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction; ``durable`` commits with an fsync (synchronous=FULL)."""
        if durable:
            self._db.execute("PRAGMA synchronous = FULL")
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        finally:
            if durable:
                self._db.execute("PRAGMA synchronous = NORMAL")

    def _migrate(self) -> None:
        with self._write() as db:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"database {self.path} has schema v{version}, newer than this shelldon "
                    f"(v{SCHEMA_VERSION}); upgrade shelldon or restore a backup"
                )
            for number in range(version, SCHEMA_VERSION):
                for statement in _split_sql(_MIGRATIONS[number]):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {number + 1}")

    @property
    def schema_version(self) -> int:
        """The schema version of the open database."""
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    # ------------------------------------------------------------ conversation and memory

    def append_message(self, chat_id: int, role: str, content: str, now: float) -> None:
        """Add one message to a chat's conversation."""
        with self._write() as db:
            db.execute(
                "INSERT INTO messages (chat_id, role, content, created_at) VALUES (?, ?, ?, ?)",
                (chat_id, role, content, now),
            )

    def recent_messages(self, chat_id: int, limit: int = 50) -> list[StoredMessage]:
        """The last ``limit`` messages of a chat, oldest first."""
        rows = self._db.execute(
            "SELECT role, content, created_at FROM messages WHERE chat_id = ? "
            "ORDER BY id DESC LIMIT ?",
            (chat_id, limit),
        ).fetchall()
        return [StoredMessage(r[0], r[1], r[2]) for r in reversed(rows)]

    def remember(self, fact: str, now: float) -> bool:
        """Keep a fact; False if it was already known."""
        with self._write() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO facts (fact, created_at) VALUES (?, ?)", (fact, now)
            )
            return cur.rowcount == 1

    def facts(self, limit: int = 100) -> list[str]:
        """Remembered facts, oldest first."""
        rows = self._db.execute("SELECT fact FROM facts ORDER BY id LIMIT ?", (limit,))
        return [r[0] for r in rows.fetchall()]

    def numbered_facts(self, limit: int = 100) -> list[Fact]:
        """Remembered facts with their numbers, oldest first."""
        rows = self._db.execute("SELECT id, fact FROM facts ORDER BY id LIMIT ?", (limit,))
        return [Fact(r[0], r[1]) for r in rows.fetchall()]

    def forget(self, fact_id: int) -> str | None:
        """Delete fact number ``fact_id``; returns what it said, or None if there is none."""
        with self._write(durable=True) as db:
            row = db.execute("DELETE FROM facts WHERE id = ? RETURNING fact", (fact_id,)).fetchone()
        return None if row is None else str(row[0])

    def clear_conversation(self, chat_id: int) -> int:
        """Drop a chat's conversation history (a fresh start); returns how many messages went."""
        with self._write(durable=True) as db:
            cur = db.execute("DELETE FROM messages WHERE chat_id = ?", (chat_id,))
            return cur.rowcount

    # ------------------------------------------------------------ approvals and promotions

    def park_approval(
        self, turn_id: str, chat_id: int, blob: bytes, summary: str, now: float, ttl_s: float
    ) -> None:
        """Park a RISKY call's resume state until the owner decides or ``ttl_s`` passes."""
        with self._write(durable=True) as db:
            db.execute(
                "INSERT INTO pending_approvals VALUES (?, ?, ?, ?, ?, ?)",
                (turn_id, chat_id, blob, summary, now, now + ttl_s),
            )

    def take_approval(self, turn_id: str, now: float) -> Taken:
        """Consume a parked approval exactly once; an expired row is consumed and reported."""
        with self._write(durable=True) as db:
            row = db.execute(
                "DELETE FROM pending_approvals WHERE turn_id = ? "
                "RETURNING chat_id, blob, summary, expires_at",
                (turn_id,),
            ).fetchone()
        if row is None:
            return Taken("unknown", turn_id)
        status = "ok" if now < row[3] else "expired"
        return Taken(status, turn_id, row[0], bytes(row[1]), row[2])

    def has_approval(self, turn_id: str) -> bool:
        """Whether an approval is parked under ``turn_id`` (without consuming it)."""
        row = self._db.execute(
            "SELECT 1 FROM pending_approvals WHERE turn_id = ?", (turn_id,)
        ).fetchone()
        return row is not None

    def has_promotion(self, turn_id: str) -> bool:
        """Whether a promotion is parked under ``turn_id`` (without consuming it)."""
        row = self._db.execute(
            "SELECT 1 FROM pending_promotions WHERE turn_id = ?", (turn_id,)
        ).fetchone()
        return row is not None

    def promotion_names(self) -> set[str]:
        """Names of the tools whose promotion is parked."""
        return {r[0] for r in self._db.execute("SELECT name FROM pending_promotions")}

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
        with self._write(durable=True) as db:
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

    def take_promotion(self, turn_id: str, now: float) -> Taken:
        """Consume a parked promotion exactly once; ``blob`` holds "name\\0code_hash", ``code``
        and ``test`` the parked bytes (empty for a row parked before they were kept)."""
        with self._write(durable=True) as db:
            row = db.execute(
                "DELETE FROM pending_promotions WHERE turn_id = ? "
                "RETURNING chat_id, name, code_hash, summary, expires_at, code, test, "
                "replaces_hash",
                (turn_id,),
            ).fetchone()
        if row is None:
            return Taken("unknown", turn_id)
        status = "ok" if now < row[4] else "expired"
        blob = f"{row[1]}\0{row[2]}".encode()
        return Taken(status, turn_id, row[0], blob, row[3], bytes(row[5]), bytes(row[6]), row[7])

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
        with self._write(durable=True) as db:
            cur = db.execute(
                "UPDATE pending_promotions SET code = ?, test = ? "
                "WHERE turn_id = ? AND length(code) = 0",
                (code, test, turn_id),
            )
            return cur.rowcount == 1

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

    def park_repair(self, offer: RepairOffer, summary: str, now: float, ttl_s: float) -> None:
        """Park a failed gate's repair offer until the owner taps "Try to fix" or "Drop"."""
        with self._write(durable=True) as db:
            db.execute(
                "INSERT INTO repair_offers (offer_id, chat_id, name, round, code, test, "
                "replaces, report, summary, created_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    offer.offer_id,
                    offer.chat_id,
                    offer.name,
                    offer.round,
                    offer.code,
                    offer.test,
                    offer.replaces,
                    offer.report,
                    summary,
                    now,
                    now + ttl_s,
                ),
            )

    def take_repair(self, offer_id: str, now: float, turn_id: str = "") -> RepairOffer | None:
        """Consume a repair offer exactly once (None if it is unknown, taken or expired); a
        ``turn_id`` records the repair turn it starts, which ``repair_round_of`` answers for."""
        with self._write(durable=True) as db:
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

    def parked_approval(self, turn_id: str) -> bytes:
        """The blob parked under ``turn_id`` without consuming it (b"" if none)."""
        row = self._db.execute(
            "SELECT blob FROM pending_approvals WHERE turn_id = ?", (turn_id,)
        ).fetchone()
        return bytes(row[0]) if row else b""

    def expire_pending(self, now: float, keep: Collection[str] = ()) -> list[Pending]:
        """Remove and return parked rows whose TTL has passed, except the approvals and repair
        offers in ``keep`` (the owner's decision on them is already queued)."""
        kept = json.dumps(sorted(keep))
        with self._write(durable=True) as db:
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

    # ------------------------------------------------------------ approval cards

    def record_card(
        self, turn_id: str, chat_id: int, message_id: int, text: str, now: float
    ) -> None:
        """Remember the card sent for ``turn_id``; cards past ``CARD_KEEP_S`` are forgotten
        (Telegram lets a bot edit a message for 48 hours)."""
        with self._write() as db:
            db.execute("DELETE FROM cards WHERE created_at < ?", (now - CARD_KEEP_S,))
            db.execute(
                "INSERT OR REPLACE INTO cards (turn_id, chat_id, message_id, text, outcome, "
                "created_at) VALUES (?, ?, ?, ?, '', ?)",
                (turn_id, chat_id, message_id, text, now),
            )

    def card(self, turn_id: str) -> Card | None:
        """The card sent for ``turn_id``, if it is remembered."""
        row = self._db.execute(
            "SELECT turn_id, chat_id, message_id, text, outcome FROM cards WHERE turn_id = ?",
            (turn_id,),
        ).fetchone()
        return Card(*row) if row else None

    def close_card(self, turn_id: str, outcome: str) -> bool:
        """Record a card's final outcome; False if it had one already (the first one stands)."""
        with self._write() as db:
            cur = db.execute(
                "UPDATE cards SET outcome = ? WHERE turn_id = ? AND outcome = ''",
                (outcome, turn_id),
            )
            return cur.rowcount == 1

    # ------------------------------------------------------------ tool health

    def strike(self, name: str, error: str, now: float) -> int:
        """Debit one strike against a self-coded tool; returns its new strike count."""
        with self._write(durable=True) as db:
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
        with self._write(durable=True) as db:
            db.execute("DELETE FROM tool_health WHERE name = ?", (name,))

    def tool_health(self) -> list[ToolHealth]:
        """Every tool with strikes, most struck first."""
        rows = self._db.execute(
            "SELECT name, strikes, last_error FROM tool_health ORDER BY strikes DESC, name"
        ).fetchall()
        return [ToolHealth(*r) for r in rows]

    # ------------------------------------------------------------ schedule and budget

    def schedule(self, chat_id: int, due_at: float, prompt: str, now: float) -> int:
        """Persist a future turn; returns its id."""
        with self._write(durable=True) as db:
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
        rows = self._db.execute(
            "SELECT id, chat_id, due_at, prompt FROM schedule "
            "WHERE started_at IS NULL ORDER BY due_at, id LIMIT ?",
            (limit,),
        ).fetchall()
        return [Scheduled(*r) for r in rows]

    def cancel_scheduled(self, schedule_id: int) -> Scheduled | None:
        """Remove a scheduled turn that has not started; returns it, or None if there is none."""
        with self._write(durable=True) as db:
            row = db.execute(
                "DELETE FROM schedule WHERE id = ? AND started_at IS NULL "
                "RETURNING id, chat_id, due_at, prompt",
                (schedule_id,),
            ).fetchone()
        return None if row is None else Scheduled(*row)

    def start_due(self, schedule_id: int, now: float) -> bool:
        """Mark a scheduled turn started; False if it was started before (each starts once)."""
        with self._write(durable=True) as db:
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
        with self._write() as db:
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

    # ------------------------------------------------------------ model usage

    def record_model_call(
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
        with self._write() as db:
            db.execute(
                "INSERT INTO model_calls "
                "(ts, provider, model, input_tokens, output_tokens, turn_id) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (now, provider, model, max(0, input_tokens), max(0, output_tokens), turn_id),
            )

    def usage_between(self, start: float, end: float) -> list[UsageRow]:
        """Model calls and tokens per provider and model with ``start <= ts < end``."""
        rows = self._db.execute(
            "SELECT provider, model, COUNT(*), SUM(input_tokens), SUM(output_tokens) "
            "FROM model_calls WHERE ts >= ? AND ts < ? GROUP BY provider, model "
            "ORDER BY provider, model",
            (start, end),
        ).fetchall()
        return [UsageRow(r[0], r[1], int(r[2]), int(r[3]), int(r[4])) for r in rows]

    # ------------------------------------------------------------ transport dedup and inbox

    def is_processed(self, update_id: int) -> bool:
        """Whether a transport update was already handed off."""
        row = self._db.execute(
            "SELECT 1 FROM processed_updates WHERE update_id = ?", (update_id,)
        ).fetchone()
        return row is not None

    def mark_processed(self, update_id: int, now: float = 0.0) -> None:
        """Record that an update was handed off (idempotent)."""
        with self._write(durable=True) as db:
            db.execute("INSERT OR IGNORE INTO processed_updates VALUES (?, ?)", (update_id, now))

    def put_inbox(self, blob: bytes, now: float, update_id: int | None = None) -> bool:
        """Durably hand off an inbound event (and mark its update processed, atomically);
        False if this update was handed off before."""
        with self._write(durable=True) as db:
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

    def inbox(self, limit: int = 100) -> list[InboxItem]:
        """Handed-off events not yet taken, oldest first."""
        rows = self._db.execute(
            "SELECT id, update_id, blob FROM inbox WHERE taken_at IS NULL ORDER BY id LIMIT ?",
            (limit,),
        ).fetchall()
        return [InboxItem(r[0], r[1], bytes(r[2])) for r in rows]

    def take_inbox(self, item_id: int, now: float, turn_id: str = "") -> bool:
        """Mark an inbox event taken (by ``turn_id`` when it starts a turn); False if someone
        took it already."""
        with self._write(durable=bool(turn_id)) as db:
            cur = db.execute(
                "UPDATE inbox SET taken_at = ?, turn_id = ? WHERE id = ? AND taken_at IS NULL",
                (now, turn_id or None, item_id),
            )
            return cur.rowcount == 1

    def finish_inbox(self, turn_id: str, now: float) -> None:
        """The turn that took an inbox event has ended (its answer went out)."""
        with self._write() as db:
            db.execute(
                "UPDATE inbox SET done_at = ? WHERE turn_id = ? AND done_at IS NULL",
                (now, turn_id),
            )

    def unfinished_inbox(self) -> list[tuple[int, str, bytes]]:
        """Events whose turn started but never ended: ``(id, turn_id, blob)``, oldest first."""
        rows = self._db.execute(
            "SELECT id, turn_id, blob FROM inbox WHERE turn_id IS NOT NULL AND done_at IS NULL "
            "ORDER BY id"
        ).fetchall()
        return [(r[0], r[1], bytes(r[2])) for r in rows]

    def unanswered_inbox(self) -> list[tuple[int, bytes]]:
        """Events not answered yet, taken by a turn or not: ``(id, blob)``, oldest first."""
        rows = self._db.execute(
            "SELECT id, blob FROM inbox WHERE done_at IS NULL ORDER BY id"
        ).fetchall()
        return [(r[0], bytes(r[1])) for r in rows]

    def abandon_inbox(self, item_ids: list[int], now: float) -> None:
        """Close events that will never be answered (taken and done now)."""
        with self._write(durable=True) as db:
            db.executemany(
                "UPDATE inbox SET taken_at = COALESCE(taken_at, ?), done_at = ? "
                "WHERE id = ? AND done_at IS NULL",
                [(now, now, item_id) for item_id in item_ids],
            )

    def reoffer_inbox(self) -> int:
        """Put events whose turn never ended back in the inbox (after a crash); how many."""
        with self._write(durable=True) as db:
            cur = db.execute(
                "UPDATE inbox SET taken_at = NULL, turn_id = NULL "
                "WHERE turn_id IS NOT NULL AND done_at IS NULL"
            )
            return cur.rowcount

    # ------------------------------------------------------------ approved self-coded tools

    def approve_tool(self, name: str, code_hash: str, now: float, turn_id: str = "") -> None:
        """Record that the owner approved ``code_hash`` as live tool ``name`` (a replacement
        overwrites the old hash): the only way code becomes a live tool."""
        with self._write(durable=True) as db:
            db.execute(
                "INSERT INTO approved_tools (name, code_hash, state, approved_at, turn_id) "
                "VALUES (?, ?, 'live', ?, ?) ON CONFLICT (name) DO UPDATE SET "
                "code_hash = excluded.code_hash, state = 'live', "
                "approved_at = excluded.approved_at, turn_id = excluded.turn_id",
                (name, code_hash, now, turn_id),
            )

    def forget_tool(self, name: str) -> ApprovedTool | None:
        """Withdraw the approval of tool ``name`` (the owner retired it): from now on no
        manifest lists it and no file of that name runs. Returns the approval it withdrew."""
        with self._write(durable=True) as db:
            row = db.execute(
                "DELETE FROM approved_tools WHERE name = ? "
                "RETURNING name, code_hash, state, approved_at",
                (name,),
            ).fetchone()
        return ApprovedTool(row[0], row[1], row[2], row[3]) if row else None

    def set_tool_state(self, name: str, state: str) -> bool:
        """Mark approved tool ``name`` live or quarantined (its approved hash is untouched);
        False if no such tool was ever approved."""
        if state not in TOOL_STATES:
            raise ValueError(f"a tool state is one of {TOOL_STATES}, not {state!r}")
        with self._write(durable=True) as db:
            cur = db.execute("UPDATE approved_tools SET state = ? WHERE name = ?", (state, name))
            return cur.rowcount == 1

    def approved_tools(self) -> list[ApprovedTool]:
        """Every approved self-coded tool, by name."""
        rows = self._db.execute(
            "SELECT name, code_hash, state, approved_at FROM approved_tools ORDER BY name"
        ).fetchall()
        return [ApprovedTool(r[0], r[1], r[2], r[3]) for r in rows]

    def approved_tool(self, name: str) -> ApprovedTool | None:
        """The approval of tool ``name``, or None."""
        row = self._db.execute(
            "SELECT name, code_hash, state, approved_at FROM approved_tools WHERE name = ?",
            (name,),
        ).fetchone()
        return ApprovedTool(row[0], row[1], row[2], row[3]) if row else None

    def promoted_hashes(self) -> dict[str, str]:
        """From the audit log: the code hash of each tool's latest promotion by the owner (what
        a toolbox kept in the workspace, before approvals were recorded, was approved as).
        None once the database was restored from a backup: its promotions came in the backup,
        which may come from anywhere, and no version since writes that old toolbox."""
        rows = self._db.execute(
            "SELECT subject, code_hash FROM audit WHERE action = 'promoted' "
            "AND actor = 'owner' AND code_hash != '' AND NOT EXISTS (SELECT 1 FROM audit "
            "WHERE action = 'restored' AND actor = 'owner') ORDER BY id"
        ).fetchall()
        return {r[0]: r[1] for r in rows}

    # ------------------------------------------------------------ audit

    def audit(
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
        with self._write(durable=True) as db:
            db.execute(
                "INSERT INTO audit (ts, actor, action, subject, detail, code_hash, turn_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    now,
                    actor,
                    action,
                    subject,
                    json.dumps(detail, sort_keys=True, default=str),
                    code_hash,
                    turn_id,
                ),
            )

    def audit_log(self, limit: int = 100) -> list[AuditEntry]:
        """The newest ``limit`` audit entries, oldest first."""
        rows = self._db.execute(
            "SELECT ts, actor, action, subject, detail, code_hash, turn_id FROM audit "
            "ORDER BY id DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [
            AuditEntry(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5], r[6]) for r in reversed(rows)
        ]


def database_in_use(path: Path) -> bool:
    """Whether any connection has the database at ``path`` open, in any process of any user
    (the service, a chat, a tools command): each open WAL connection holds a shared lock on
    the file, so an exclusive lock is refused at once. ``/proc`` cannot tell: the service is
    not dumpable, so even its own user cannot read its descriptors."""
    if not path.exists():
        return False
    try:
        db = sqlite3.connect(path, timeout=0, isolation_level=None)
    except sqlite3.Error:
        return True
    try:
        db.execute("PRAGMA locking_mode = EXCLUSIVE")
        db.execute("BEGIN EXCLUSIVE")
        db.execute("ROLLBACK")
    except sqlite3.OperationalError:
        return True
    finally:
        db.close()
    return False


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
