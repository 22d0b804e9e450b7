"""The store's one sqlite connection: opened 0600 in WAL mode with a busy timeout (several
actor processes share the file), one write transaction at a time, durable commits on demand.

Writes that must survive power loss commit with ``synchronous=FULL``; the rest commit with
``NORMAL`` (WAL keeps the file consistent; a power cut may forget the last few of them), which
keeps an fsync out of every turn's path.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self


class StoreError(RuntimeError):
    """The database cannot be used (newer schema than this code, unreadable file)."""


class Db:
    """The one connection a ``Store`` owns; ``prepare`` (the migrations) runs once it is open."""

    def __init__(self, path: Path, busy_timeout_ms: int, prepare: Callable[[Db], None]) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # exists already, or sqlite will say why
            # Created 0600 before sqlite sees it: its -wal and -shm files copy this mode.
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        try:
            # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, so writers queue on
            # the busy timeout instead of failing with "database is locked" mid-transaction.
            self.conn = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_ms / 1000)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {path}: {exc}") from None
        try:
            self.conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            # A small page cache: every actor process holds a connection on a 416 MB board.
            self.conn.execute("PRAGMA cache_size = -512")
            self.conn.execute("PRAGMA foreign_keys = ON")
            prepare(self)
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise StoreError(f"cannot use database {path}: {exc}") from None
        except StoreError:
            self.conn.close()
            raise

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        """One statement outside a write transaction (a read)."""
        return self.conn.execute(sql, params)

    @contextmanager
    def write(self, *, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction; ``durable`` commits with an fsync (synchronous=FULL)."""
        if durable:
            self.conn.execute("PRAGMA synchronous = FULL")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        finally:
            if durable:
                self.conn.execute("PRAGMA synchronous = NORMAL")

    def backup_to(self, path: Path) -> None:
        """Copy the whole database into the new file ``path`` (created 0600) with sqlite's online
        backup: one consistent snapshot while other processes keep writing (WAL readers do not
        block writers), left as a self-contained file with a rollback journal."""
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        target = sqlite3.connect(path)
        try:
            # pages=-1: every page in one step, under one read transaction, so one snapshot.
            self.conn.backup(target, pages=-1)
            target.execute("PRAGMA journal_mode = DELETE")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot back up database {self.path}: {exc}") from None
        finally:
            target.close()

    @property
    def schema_version(self) -> int:
        """The schema version of the open database."""
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Aggregate:
    """One aggregate's tables, read and written over the store's shared connection."""

    def __init__(self, db: Db) -> None:
        self._db = db


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
