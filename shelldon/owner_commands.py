"""Answers to the owner's commands (``OWNER_COMMANDS``: /tools, /pending, /memory, /usage…).

They need no turn, no worker and no model: plain reads (and the owner's own deletions) of the
store and the tool directories.
"""

from __future__ import annotations

import datetime as dt

from shelldon.config import BrainSettings, Settings
from shelldon.rules.arbiter import budget_day
from shelldon.rules.commands import OWNER_COMMANDS
from shelldon.rules.turn_reply import one_line
from shelldon.store import Store, UsageRow
from shelldon.toolbox.toolbox import Toolbox, ToolboxError

HELP = (
    "I'm shelldon, your pet agent. Just talk to me.\n"
    "I use tools on my own when they are harmless, and ask you before anything risky "
    "(writing files, running commands, fetching URLs, git). I can also write new tools "
    "for myself; you approve each one.\n\n"
    + "\n".join(f"/{name} — {line}" for name, line in OWNER_COMMANDS if name != "start")
)


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def tools_text(store: Store, selfcode: Toolbox) -> str:
    """/tools: live, staged and quarantined self-coded tools, with strikes; files that will not
    run because they are not what the owner approved; and why self-coded tools are off, if so."""
    strikes = {h.name: h for h in store.tools.health()}
    lines = [
        "Built-in: get_time, read_file, list_dir, python_eval (free); "
        "write_file, run_shell, http_get, git (ask first)."
    ]

    def with_strikes(name: str) -> str:
        h = strikes.get(name)
        return f"{name} ({h.strikes} strike{'s' if h.strikes != 1 else ''})" if h else name

    off = selfcode.off_reason()
    if off:
        lines.append(f"⚠️ {off[0].upper()}{off[1:]}.")
    tampered = selfcode.tampered()
    bad = {t.name for t in tampered if t.state == "live"}
    live = tuple(n for n in selfcode.live() if n not in bad)
    lines.append("Self-coded, live: " + (", ".join(map(with_strikes, live)) or "none yet"))
    if tampered:
        lines.append(
            "Never run, not the code you approved (propose again to change a tool): "
            + ", ".join(f"{t.name} ({t.problem})" for t in tampered)
        )
    staged = selfcode.staged()
    if staged:
        lines.append("Waiting for your approval: " + ", ".join(staged))
    quarantined = selfcode.quarantined()
    if quarantined:
        lines.append(
            "Quarantined: "
            + ", ".join(
                f"{with_strikes(n)} — {selfcode.quarantine_reason(n) or 'failed repeatedly'}"
                for n in quarantined
            )
        )
        lines.append("Bring one back with /restore NAME.")
    return "\n".join(lines)


def pending_text(store: Store, now: float) -> str:
    """/pending: parked approvals and promotions with their age."""
    rows = store.parked.pending()
    if not rows:
        return "Nothing is waiting for you."
    lines = [f"{len(rows)} waiting for your tap:"]
    for p in rows:
        what = {"approval": "run", "promotion": "add tool", "repair": "fix tool"}.get(p.kind)
        age, left = _age(now - p.created_at), _age(p.expires_at - now)
        lines.append(f"• {what or p.kind}: {p.summary} — {age} old, expires in {left}")
    return "\n".join(lines)


def budget_text(store: Store, settings: Settings, now: float) -> str:
    """/budget: today's scheduler budget."""
    spent = store.schedule.budget_spent(budget_day(now))
    limit = settings.limits.daily_turn_budget
    return (
        f"Turns I started myself today: {spent} of {limit}. "
        "Your own messages are never budgeted (each is capped at "
        f"{settings.limits.max_tool_executions} tool runs and "
        f"{settings.limits.turn_timeout_s:g} s)."
    )


def restore_tool(store: Store, selfcode: Toolbox, name: str, now: float) -> str:
    """/restore NAME: move a quarantined tool back to live with its strikes reset."""
    if not name:
        q = selfcode.quarantined()
        return "Usage: /restore NAME. Quarantined: " + (", ".join(q) if q else "none")
    try:
        selfcode.restore(name)
    except (ToolboxError, FileNotFoundError, OSError) as exc:
        return f"Could not restore {name}: {exc}"
    store.tools.reset_strikes(name)
    store.audit.record("owner", "restored", name, {}, now)
    return f"Restored {name}: it is live again with its strikes reset."


def _number(arg: str) -> int | None:
    """The N of "/forget N" ("#3" and "3" alike), or None when it is no number."""
    text = arg.strip().removeprefix("#")
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def memory_text(store: Store) -> str:
    """/memory: every remembered fact with its number."""
    facts = store.conversation.numbered_facts(limit=1000)
    if not facts:
        return "I don't remember anything yet. When I keep something you tell me, I say so with 📝."
    lines = [f"What I remember ({len(facts)}); /forget N drops one:"]
    lines += [f"#{f.id} {one_line(f.fact)}" for f in facts]
    return "\n".join(lines)


def forget_fact(store: Store, arg: str, now: float) -> str:
    """/forget N: delete fact number N, audited by number only (what it said is gone)."""
    number = _number(arg)
    if number is None:
        return "Usage: /forget N, with the number /memory shows."
    fact = store.conversation.forget(number)
    if fact is None:
        return f"I have no fact #{number}. /memory lists what I remember."
    store.audit.record("owner", "forgot", f"fact #{number}", {"chars": len(fact)}, now)
    return f"Forgotten #{number}: {one_line(fact)}"


def new_conversation(store: Store, chat_id: int, now: float) -> str:
    """/new: drop this chat's conversation history; the audit keeps only how many messages."""
    dropped = store.conversation.clear(chat_id)
    store.audit.record("owner", "new_conversation", f"chat {chat_id}", {"messages": dropped}, now)
    if not dropped:
        return "We're at a fresh start already. What I remember stays (/memory)."
    return (
        f"Fresh start: I let go of our conversation so far ({dropped} messages). "
        "What I remember stays (/memory)."
    )


def _span(seconds: float) -> str:
    """``_age``, in days past two of them (a turn may be scheduled weeks ahead)."""
    return f"{int(seconds) // 86400}d" if seconds >= 172800 else _age(seconds)


def _utc(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def schedule_text(store: Store, now: float) -> str:
    """/schedule: the turns scheduled for later, soonest first, with their numbers."""
    upcoming = store.schedule.upcoming(limit=100)
    if not upcoming:
        return "Nothing is scheduled."
    lines = [f"Scheduled ({len(upcoming)}); /cancel N drops one:"]
    for s in upcoming:
        when = "due now" if s.due_at <= now else f"in {_span(s.due_at - now)}"
        lines.append(f"#{s.id} {_utc(s.due_at)} ({when}): {one_line(s.prompt)}")
    return "\n".join(lines)


def cancel_scheduled(store: Store, arg: str, now: float) -> str:
    """/cancel N: remove scheduled turn number N before it starts, audited."""
    number = _number(arg)
    if number is None:
        return "Usage: /cancel N, with the number /schedule shows."
    gone = store.schedule.cancel(number)
    if gone is None:
        return f"There is no scheduled turn #{number} waiting (it may have run). See /schedule."
    detail = {"due_at": gone.due_at, "prompt": gone.prompt[:200]}
    store.audit.record("owner", "cancelled", f"schedule #{number}", detail, now)
    return f"Cancelled #{number}, due {_utc(gone.due_at)}: {one_line(gone.prompt)}"


def usage_cost(row: UsageRow, brain: BrainSettings) -> float | None:
    """What ``row``'s calls cost at the configured prices, or None when no price is known for
    its provider and model (prices are set for ``[brain]`` and ``[brain.fallback]`` only)."""
    for priced in (brain, brain.fallback):
        if (row.provider, row.model) != (priced.provider, priced.model):
            continue
        if priced.price_in_per_mtok > 0 or priced.price_out_per_mtok > 0:
            cost = row.input_tokens * priced.price_in_per_mtok
            return (cost + row.output_tokens * priced.price_out_per_mtok) / 1_000_000
    return None


def _calls(n: int) -> str:
    return f"{n:,} call" if n == 1 else f"{n:,} calls"


def _money(amount: float) -> str:
    return f"${amount:.2f}" if amount >= 0.01 or amount == 0 else f"${amount:.4f}"


def _usage_lines(title: str, rows: list[UsageRow], brain: BrainSettings) -> list[str]:
    if not rows:
        return [f"{title}: no model calls."]
    calls = sum(r.calls for r in rows)
    tokens_in = sum(r.input_tokens for r in rows)
    tokens_out = sum(r.output_tokens for r in rows)
    costs = [usage_cost(r, brain) for r in rows]
    total = f", {_money(sum(c or 0.0 for c in costs))}" if any(c is not None for c in costs) else ""
    lines = [f"{title}: {_calls(calls)}, {tokens_in:,} tokens in, {tokens_out:,} out{total}"]
    for row, cost in zip(rows, costs, strict=True):
        price = _money(cost) if cost is not None else "no price set"
        lines.append(
            f"• {row.provider} {row.model}: {_calls(row.calls)}, {row.input_tokens:,} in, "
            f"{row.output_tokens:,} out, {price}"
        )
    return lines


def usage_text(store: Store, brain: BrainSettings, now: float) -> str:
    """/usage: model calls and tokens today and this month (UTC), per provider and model, and
    their cost where ``[brain]`` names a price."""
    today = dt.datetime.fromtimestamp(now, dt.UTC).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    tomorrow = today + dt.timedelta(days=1)
    month = today.replace(day=1)
    next_month = (month + dt.timedelta(days=32)).replace(day=1)
    lines = _usage_lines(
        "Today", store.usage.between(today.timestamp(), tomorrow.timestamp()), brain
    )
    lines += _usage_lines(
        f"This month ({month:%B %Y})",
        store.usage.between(month.timestamp(), next_month.timestamp()),
        brain,
    )
    if brain.price_in_per_mtok == 0 and brain.price_out_per_mtok == 0:
        lines.append(
            "Set [brain] price_in_per_mtok and price_out_per_mtok (US$ per million tokens) "
            "to see what it costs."
        )
    return "\n".join(lines)


def retire_tool(store: Store, selfcode: Toolbox, name: str, now: float, via: str) -> str:
    """/retire NAME (and ``shelldon tools remove NAME``): take a live or quarantined tool out
    for good, its kept test archived with it; audited with the code hash it had."""
    if not name:
        live = ", ".join(selfcode.live()) or "none"
        return f"Usage: /retire NAME. Live: {live}"
    try:
        retired = selfcode.retire(name)
    except (ToolboxError, OSError) as exc:
        return f"Could not retire {name}: {exc}"
    store.tools.reset_strikes(retired.name)
    detail = {"was": retired.state, "archive": str(retired.archive), "via": via}
    store.audit.record("owner", "retired", retired.name, detail, now, code_hash=retired.code_hash)
    return (
        f"Retired {retired.name}: it is out of my toolbox and will not run again "
        f"(its code and test are kept in {retired.archive})."
    )


def answer_command(
    name: str,
    arg: str,
    store: Store,
    selfcode: Toolbox,
    settings: Settings,
    now: float,
    *,
    chat_id: int,
) -> str:
    """The reply to owner command ``name`` with argument ``arg``, typed in chat ``chat_id``; any
    other ``/name`` was not sent to the model either, and its sender is told which commands
    there are."""
    match name:
        case "start" | "help":
            return HELP
        case "tools":
            return tools_text(store, selfcode)
        case "pending":
            return pending_text(store, now)
        case "budget":
            return budget_text(store, settings, now)
        case "restore":
            return restore_tool(store, selfcode, arg, now)
        case "memory":
            return memory_text(store)
        case "forget":
            return forget_fact(store, arg, now)
        case "new":
            return new_conversation(store, chat_id, now)
        case "schedule":
            return schedule_text(store, now)
        case "cancel":
            return cancel_scheduled(store, arg, now)
        case "usage":
            return usage_text(store, settings.brain, now)
        case "retire":
            return retire_tool(store, selfcode, arg, now, via="command")
    known = " ".join(f"/{command}" for command, _ in OWNER_COMMANDS)
    return (
        f"I don't know /{name}, so I did nothing with it (it was not passed on to me as a "
        f"message). My commands: {known}. To ask me something, write it without the /."
    )
