"""The sqlite store: one file under home, one aggregate per concern (conversation, parked,
cards, inbox, schedule, tools, usage, audit, pairing) over one connection. Every time is passed in
(``now``) so tests use a fake clock. Each actor (and each command) opens its own ``Store``;
the store that opens a connection closes it.
"""

from __future__ import annotations

from pathlib import Path

from shelldon.store.audit import Audit
from shelldon.store.cards import CARD_KEEP_S, Cards
from shelldon.store.conversation import Conversation
from shelldon.store.db import Db, StoreError, database_in_use
from shelldon.store.inbox import Inbox
from shelldon.store.pairing import Pairing
from shelldon.store.parked import Parked
from shelldon.store.rows import (
    ApprovedTool,
    Distrusted,
    PairingCode,
    ParkedPromotion,
    Pending,
    RepairOffer,
    Scheduled,
    UsageRow,
)
from shelldon.store.schedule import Schedule
from shelldon.store.schema import _MIGRATIONS as _MIGRATIONS  # the backup tests replay them
from shelldon.store.schema import SCHEMA_VERSION, check_foreign_database, migrate
from shelldon.store.schema import _split_sql as _split_sql
from shelldon.store.tools import Tools
from shelldon.store.usage import Usage

__all__ = [
    "CARD_KEEP_S", "SCHEMA_VERSION", "ApprovedTool", "Distrusted", "PairingCode",
    "ParkedPromotion", "Pending", "RepairOffer", "Scheduled", "Store", "StoreError", "UsageRow",
    "check_foreign_database", "database_in_use",
]  # fmt: skip


class Store(Db):
    """The sqlite store, its aggregates as attributes; open one per process with ``Store(path)``
    and close it with ``close()`` (or use it as a context manager)."""

    def __init__(self, path: Path | str, *, busy_timeout_ms: int = 5000) -> None:
        super().__init__(Path(path), busy_timeout_ms, migrate)
        self.conversation, self.parked, self.cards = Conversation(self), Parked(self), Cards(self)
        self.inbox, self.schedule, self.tools = Inbox(self), Schedule(self), Tools(self)
        self.usage, self.audit, self.pairing = Usage(self), Audit(self), Pairing(self)
