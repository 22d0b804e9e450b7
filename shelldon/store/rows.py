"""The values the store returns: plain frozen rows, importable without sqlite."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Taken:
    """The outcome of taking a parked approval: ``status`` is "ok", "expired" or "unknown"."""

    status: str
    turn_id: str
    chat_id: int = 0
    blob: bytes = b""
    summary: str = ""


@dataclass(frozen=True, slots=True)
class ParkedPromotion:
    """The outcome of taking a parked promotion (``status`` as for ``Taken``): the tool, the
    hash the owner was shown, the bytes the gate passed (hash-checked by whoever promotes
    them), and the approved hash of the tool a replacement was diffed against ("" if none)."""

    status: str
    turn_id: str
    chat_id: int = 0
    name: str = ""
    code_hash: str = ""
    summary: str = ""
    code: bytes = b""
    test: bytes = b""
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


@dataclass(frozen=True, slots=True)
class PairingCode:
    """A code issued to one Telegram user (only its digest is kept), and what became of it."""

    user_id: int
    chat_id: int
    name: str
    username: str
    digest: str
    issued_at: float
    expires_at: float
    reminded_at: float = 0.0
    redeemed_at: float = 0.0
