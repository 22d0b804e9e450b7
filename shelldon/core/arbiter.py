"""The arbiter's decisions, as plain functions: what to do with the inbox right now.

One turn at a time. Decisions (approval taps) and owner commands are not chat: they are handled
at once and never wait behind a turn. Chat messages wait in the durable inbox, oldest first; past
the queue bound the newest ones are answered "busy" and dropped.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from shelldon.contracts import ContractError, Decision, InboundMessage, decode

OWNER_COMMANDS: tuple[tuple[str, str], ...] = (
    ("start", "Say hello and see what I can do"),
    ("help", "How to talk to me, and what needs your tap"),
    ("tools", "My tools: live, staged, quarantined, with strikes"),
    ("pending", "Approvals and promotions waiting for you, with their age"),
    ("budget", "Turns left today"),
    ("restore", "Bring back a quarantined tool: /restore NAME"),
)
"""Owner commands, answered without a turn, with the line Telegram's menu shows for each
(registered with setMyCommands at start): the one table of them."""

COMMANDS = tuple(name for name, _ in OWNER_COMMANDS)


@dataclass(frozen=True, slots=True)
class Entry:
    """One decoded inbox row."""

    item_id: int
    event: InboundMessage | Decision


@dataclass(slots=True)
class InboxPlan:
    """What to do with the inbox: handle ``now`` at once, maybe ``start`` a turn, answer ``busy``
    ones, drop ``bad`` rows (undecodable)."""

    now: list[Entry] = field(default_factory=list)
    start: Entry | None = None
    busy: list[Entry] = field(default_factory=list)
    bad: list[tuple[int, str]] = field(default_factory=list)


def command_of(text: str) -> tuple[str, str] | None:
    """``("restore", "weather")`` for "/restore weather" (also "/restore@my_bot weather")."""
    if not text.startswith("/"):
        return None
    head, _, rest = text[1:].partition(" ")
    name = head.split("@", 1)[0].lower()
    return (name, rest.strip()) if name in COMMANDS else None


def plan_inbox(rows: list[tuple[int, bytes]], *, busy: bool, max_queue: int) -> InboxPlan:
    """Sort the inbox rows (oldest first) into immediate work, a turn to start, and overflow."""
    plan = InboxPlan()
    chat: list[Entry] = []
    for item_id, blob in rows:
        try:
            event = decode(blob)
        except ContractError as exc:
            plan.bad.append((item_id, str(exc)))
            continue
        if not isinstance(event, InboundMessage | Decision):
            plan.bad.append((item_id, f"{type(event).__name__} does not belong in the inbox"))
            continue
        entry = Entry(item_id, event)
        if isinstance(event, Decision) or command_of(event.text):
            plan.now.append(entry)
        else:
            chat.append(entry)
    if not busy and chat:
        plan.start = chat.pop(0)
    if len(chat) > max_queue:
        plan.busy = chat[max_queue:]
    return plan


def left_behind(rows: list[tuple[int, bytes]], chat_id: int) -> list[tuple[int, str]]:
    """Events of ``chat_id`` that an earlier session left unanswered, ``(item_id, what)``.

    A console session that ended mid-turn (Ctrl-C, a crash) leaves its typed lines here; the
    owner has left that conversation, so the next session must not answer them out of context
    (a Telegram chat is still there: its events are answered after a restart)."""
    found = []
    for item_id, blob in rows:
        try:
            event = decode(blob)
        except ContractError:
            continue  # plan_inbox drops it, logged
        if isinstance(event, InboundMessage) and event.chat_id == chat_id:
            found.append((item_id, event.text))
        elif isinstance(event, Decision) and event.chat_id == chat_id:
            found.append((item_id, "yes" if event.approved else "no"))
    return found


def budget_day(now: float) -> str:
    """The budget's day key (UTC date) for epoch seconds ``now``."""
    return dt.datetime.fromtimestamp(now, dt.UTC).date().isoformat()
