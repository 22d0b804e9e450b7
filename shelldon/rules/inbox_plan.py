"""The inbox, planned: which rows are handled at once, which starts a turn, which are answered
"busy", and which are dropped (undecodable, not inbox events, not from an owner)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from shelldon.contracts import ContractError, Decision, InboundMessage, decode
from shelldon.rules.commands import is_chat
from shelldon.store.rows import Scheduled


@dataclass(frozen=True, slots=True)
class Entry:
    """One decoded inbox row."""

    item_id: int
    event: InboundMessage | Decision


@dataclass(slots=True)
class InboxPlan:
    """What to do with the inbox: handle ``now`` at once, maybe ``start`` a turn, answer ``busy``
    ones, drop ``bad`` rows (undecodable, not inbox events, or not from an owner)."""

    now: list[Entry] = field(default_factory=list)
    start: Entry | None = None
    busy: list[Entry] = field(default_factory=list)
    bad: list[tuple[int, str]] = field(default_factory=list)


def plan_inbox(
    rows: Iterable[tuple[int, bytes]], *, busy: bool, max_queue: int, owners: frozenset[int]
) -> InboxPlan:
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
        if event.user_id not in owners:
            plan.bad.append(
                (item_id, f"{type(event).__name__} from user {event.user_id}, no owner")
            )
            continue
        entry = Entry(item_id, event)
        if is_chat(event):
            chat.append(entry)
        else:
            plan.now.append(entry)
    if not busy and chat:
        plan.start = chat.pop(0)
    if len(chat) > max_queue:
        plan.busy = chat[max_queue:]
    return plan


def left_behind(rows: Iterable[tuple[int, bytes]], chat_id: int) -> list[tuple[int, str]]:
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


def left_behind_notice(gone: list[tuple[int, str]]) -> str:
    """What the console says about lines an earlier session left unanswered."""
    said = ", ".join(repr(text[:60]) for _, text in gone[:3])
    more = f" and {len(gone) - 3} more" if len(gone) > 3 else ""
    return (
        f"(An earlier session ended before I answered {said}{more}; I won't answer "
        "that out of context now. Ask again if you still want it.)"
    )


@dataclass(frozen=True, slots=True)
class InboxView:
    """The inbox and what it is decided against, read at one moment: untaken rows oldest
    first, the turn ids parked for a tap, the scheduled turns due, today's budget spent."""

    rows: tuple[tuple[int, bytes], ...]
    now: float
    approvals: frozenset[str] = frozenset()
    promotions: frozenset[str] = frozenset()
    repairs: frozenset[str] = frozenset()
    due: tuple[Scheduled, ...] = ()
    spent_today: int = 0


def inbox_view(
    rows: Iterable[tuple[int, bytes]],
    parked: Iterable[tuple[str, str]],
    due: Iterable[Scheduled],
    spent_today: int,
    now: float,
) -> InboxView:
    """An ``InboxView`` from the store's rows: ``parked`` as ``(kind, turn_id)`` pairs."""
    pairs = list(parked)
    return InboxView(
        rows=tuple(rows),
        now=now,
        approvals=frozenset(t for kind, t in pairs if kind == "approval"),
        promotions=frozenset(t for kind, t in pairs if kind == "promotion"),
        repairs=frozenset(t for kind, t in pairs if kind == "repair"),
        due=tuple(due),
        spent_today=spent_today,
    )
